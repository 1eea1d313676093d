"""`grpo-warehouse sample`: it writes only into a folder of its own, refuses anything else on one line, and prints
the build command that loads what it wrote; the CLI's version and help."""

import json
import shlex
import shutil
from importlib.metadata import version

import pytest

from pipelines.cli import main, parser
from pipelines.release.sample import BINARY_RELEASE, MULTI_TARGET_RELEASE


def test_sample_prints_the_build_command_of_its_releases(tmp_path, capsys):
    out = tmp_path / "a folder; rm -rf x"  # a name a shell would split or run: quoted in the command
    assert main(["sample", "--out", str(out), "--scale", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    command = shlex.split(lines[lines.index("build its warehouse with:") + 1])
    assert command[:2] == ["grpo-warehouse", "build"]
    written = [MULTI_TARGET_RELEASE, BINARY_RELEASE, f"{MULTI_TARGET_RELEASE}_s001", f"{BINARY_RELEASE}_s001"]
    assert parser().parse_args(command[1:]).release == [str(out / name) for name in written]
    assert sorted(p.name for p in out.iterdir()) == sorted([".sample.json", *written])
    assert json.loads((out / ".sample.json").read_text())["scale"] == 2


def test_sample_writes_again_into_its_own_folder_and_an_empty_one(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["sample", "--out", str(empty)]) == 0
    readme = empty / MULTI_TARGET_RELEASE / "README.md"
    readme.write_text("changed")
    assert main(["sample", "--out", str(empty), "--seed", "1"]) == 0  # its marker is there: its own folder
    assert readme.read_text().startswith("# GRPO Training Runs")


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("/dev/null", "/dev/null is not a folder: give a new folder for the sample"),
        ("{tmp}/notes.txt", "{tmp}/notes.txt is not a folder: give a new folder for the sample"),
        ("{tmp}/notes.txt/sub", "cannot write {tmp}/notes.txt/sub: Not a directory"),
        (
            "{tmp}/mine",
            "{tmp}/mine holds files that grpo-warehouse sample did not write (it has no .sample.json): give a new or "
            "empty folder",
        ),
    ],
)
def test_sample_refuses_a_folder_it_does_not_own_and_overwrites_nothing(tmp_path, capsys, out, message):
    (tmp_path / "notes.txt").write_text("my notes")
    mine = tmp_path / "mine" / MULTI_TARGET_RELEASE
    mine.mkdir(parents=True)
    (mine / "README.md").write_text("my readme")
    assert main(["sample", "--out", out.format(tmp=tmp_path)]) == 2
    assert capsys.readouterr().err == f"grpo-warehouse sample: {message.format(tmp=tmp_path)}\n"
    assert (tmp_path / "notes.txt").read_text() == "my notes"
    assert sorted(p.name for p in (tmp_path / "mine").rglob("*")) == ["README.md", MULTI_TARGET_RELEASE]
    assert (mine / "README.md").read_text() == "my readme"


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--seed", "-1"], "--seed must be 0 or more, not -1"), (["--scale", "0"], "--scale must be 1 or more, not 0")],
)
def test_sample_refuses_a_negative_seed_or_no_scale(tmp_path, capsys, args, message):
    assert main(["sample", "--out", str(tmp_path / "new"), *args]) == 2
    assert capsys.readouterr().err == f"grpo-warehouse sample: {message}\n"
    assert not (tmp_path / "new").exists()


def test_sample_refuses_a_scale_the_disk_cannot_hold_before_writing(tmp_path, capsys):
    free = shutil.disk_usage(tmp_path).free
    scale = free // 50_000_000 + 1  # one sample more than fits, at 50 MB each
    assert main(["sample", "--out", str(tmp_path / "new"), "--scale", str(scale)]) == 2
    err = capsys.readouterr().err  # the free space moves as others write: its figure is not compared
    assert err.startswith(f"grpo-warehouse sample: --scale {scale} writes about {scale * 50_000_000 / 1e9:.3g} GB, ")
    assert err.endswith(" GB free\n") and f", and {tmp_path} has " in err and err.count("\n") == 1
    assert not (tmp_path / "new").exists()
    assert main(["sample", "--out", str(tmp_path / "new"), "--scale", str(10**20)]) == 2  # refused, not hanging
    assert "--scale 100000000000000000000 writes about 5e+18 GB" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"grpo-warehouse {version('grpo-warehouse')}\n"


@pytest.mark.parametrize(("command", "flags"), [("sample", ["--out", "--seed"]), ("sql", ["query", "--format"])])
def test_every_flag_has_help(command, flags):
    commands = next(a for a in parser()._actions if a.dest == "command")
    actions = {(a.option_strings or [a.dest])[0]: a for a in commands.choices[command]._actions}
    assert all(actions[flag].help for flag in flags)
    assert all(a.help for name, a in actions.items() if name != "-h")
