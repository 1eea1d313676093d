"""Hostile variants through the CLI, each reported under its true cause or loaded whole: an empty extra key, an epoch
number of 20 digits, a byte-order mark, UTF-16 text, a document of only null."""

import codecs
import contextlib
import io
import json

import pytest
from helpers import epoch_document, write_epoch_file

# One whole build, which the module's tests read on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile_variants")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("variants")
    release = root / "rel"
    write_epoch_file(release / "run_keys", 0, epoch_document(0, n=2, **{"": 5, "extra_": 6, "a.b": 7}))
    write_epoch_file(release / "run_files", 0, epoch_document(0, n=2))
    text = json.dumps(epoch_document(1, n=2))
    write_epoch_file(release / "run_files", 1, codecs.BOM_UTF8 + text.encode())
    write_epoch_file(release / "run_files", 2, text.replace('"epoch": 1', '"epoch": 2').encode("utf-16"))
    write_epoch_file(release / "run_files", 3, "null")
    (release / "run_files" / f"epoch_{1:020d}_results.json").write_text(text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["build", "--release", str(release), "--warehouse", str(root / "wh")])
    return code, root / "wh", err.getvalue()


def test_an_empty_extra_key_gets_a_column_every_client_can_name(built, query):
    assert built[0] == 0 and "Traceback" not in built[2]
    rows = query(built[1], "select extra_, extra_extra_, \"a.b\" from fact_epochs where run_id = 'run_keys'")
    assert rows == [(5, 6, 7)]


def test_each_file_is_reported_under_its_true_cause(built, query):
    errors = "select source_path, error_kind, message from ingest_errors where severity = 'error' order by 1"
    assert query(built[1], errors) == [
        (
            f"run_files/epoch_{1:020d}_results.json",
            "stray_file",
            "an epoch number of 20 digits, over the 9 an epoch may have; not parsed",
        ),
        (
            "run_files/epoch_001_results.json",
            "invalid_json",
            "the file starts with a UTF-8 byte-order mark (bytes EF BB BF), which JSON text may not; saved without it, "
            "it loads",
        ),
        (
            "run_files/epoch_002_results.json",
            "invalid_utf8",
            "the file is UTF-16 or UTF-32 text (a byte-order mark or NUL bytes at its start), not UTF-8",
        ),
        ("run_files/epoch_003_results.json", "not_an_object", "the document is a JSON null, not an object"),
    ]
    assert query(built[1], "select epoch from fact_epochs where run_id = 'run_files'") == [(0,)]


def test_an_interrupted_build_says_so_and_the_next_one_builds(tmp_path, monkeypatch, capsys, query):
    from pipelines.cli import main
    from pipelines.defs.models import assets

    release, warehouse = tmp_path / "rel", tmp_path / "wh"
    for epoch in (0, 1):
        write_epoch_file(release / "run_a", epoch, epoch_document(epoch, n=2))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while a step runs, as Dagster's executor sees it

    with monkeypatch.context() as patch:  # during the models, which the publication waits for
        patch.setattr(assets, "refresh_model", interrupted)
        assert main(["build", "--release", str(release), "--warehouse", str(warehouse)]) == 130
    assert capsys.readouterr().err == "grpo-warehouse build: interrupted\n"
    assert not (warehouse / "warehouse.duckdb").exists()  # nothing published from a build cut short
    assert main(["build", "--release", str(release), "--warehouse", str(warehouse)]) == 0
    assert query(warehouse, "select run_id, epoch, mean_reward from epoch_metrics order by 2") == [
        ("run_a", 0, 0.125),
        ("run_a", 1, 0.125),
    ]
