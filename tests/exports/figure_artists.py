"""The figure's artists as a reader tells them apart: by the id each is drawn under, and by colour."""

from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex


def by_gid(ax, prefix: str) -> dict[str, object]:
    """A panel's lines and bands whose id starts `prefix:`, by the rest of their id (a run or a configuration)."""
    artists = list(ax.get_lines()) + list(ax.collections)
    return {str(a.get_gid()).split(":", 1)[1]: a for a in artists if str(a.get_gid()).startswith(prefix + ":")}


def colour_of(artist) -> str:
    colour = artist.get_facecolor()[0] if isinstance(artist, PolyCollection) else artist.get_color()
    return to_hex(colour, keep_alpha=False)
