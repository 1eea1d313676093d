"""The canvas the ablation figures are drawn on: matplotlib's Agg and SVG, doing once the text work that repeats."""

from __future__ import annotations

import codecs

import matplotlib as mpl
import numpy as np
from matplotlib import cbook
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.backends.backend_mixed import MixedModeRenderer
from matplotlib.backends.backend_svg import FigureCanvasSVG, RendererSVG
from matplotlib.font_manager import FontManager, fontManager, get_font
from matplotlib.transforms import Affine2D

try:  # matplotlib's private helpers the SVG renderer below builds on: a matplotlib without them gets its own canvas
    from matplotlib.backends.backend_svg import _generate_css, _quote_escape_attrib, _short_float_fmt
except ImportError:
    _generate_css = _quote_escape_attrib = _short_float_fmt = None

# matplotlib's settings a text's font and glyphs depend on, besides the text's own (words, font, size, place, angle):
# those findfont picks a font file with, and those of the glyphs' shapes.
FONT_SETTINGS = (
    *(f"font.{name}" for name in ("family", "style", "variant", "weight", "stretch", "size")),
    *(f"font.{name}" for name in ("serif", "sans-serif", "cursive", "fantasy", "monospace")),
    "font.enable_last_resort",
    "text.hinting",
    "text.kerning_factor",
)
# Where Text._get_layout reads a font's ascent, descent and line gap: the first of these tables the font has.
HEIGHT_TABLES = [("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"), ("hhea", "lineGap", "ascent", "descent")]
SHAPING_GETTERS = ("get_fontfeatures", "get_language")
DRAWN_TEXTS_KEPT = 4096  # about 70 figures' texts; the oldest are forgotten all at once past it

# A text's glyph images as Agg drew them, by everything they depend on, for every canvas of this process.
_drawn_texts: dict[tuple, list[tuple]] = {}
# A text's size in an SVG (unhinted, at 72 dpi), for every SVG of this process.
_svg_text_sizes: dict[tuple, tuple[float, float, float]] = {}
# A font's ascent, descent and line gap at a dpi, for every figure of this process.
_font_heights: dict[tuple, tuple] = {}


def _font_key(prop) -> tuple:
    """A font as a key: its properties (copied: FontProperties hash by their current, mutable state) and the settings
    that decide which font files they find and how the glyphs are shaped."""
    return prop.copy(), tuple(_hashable(mpl.rcParams[name]) for name in FONT_SETTINGS)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value


def font_height_metrics(prop, dpi: float) -> tuple[float, float, float]:
    """The ascent, descent and line gap Text._get_layout gives every line of a text in this font, at dpi: read from
    the font's tables once per process rather than at each of the few hundred layouts of a figure. None when the
    font has none of the tables (matplotlib then measures a sample)."""
    key = (*_font_key(prop), dpi)
    metrics = _font_heights.get(key)
    if metrics is None:
        metrics = _kept(_font_heights, key, _read_font_height_metrics(prop, dpi))
    return metrics


def _kept(cache: dict, key, value):
    """The value, kept in the cache under key; a cache of DRAWN_TEXTS_KEPT entries is emptied first, all at once."""
    if len(cache) >= DRAWN_TEXTS_KEPT:
        cache.clear()
    cache[key] = value
    return value


def _read_font_height_metrics(prop, dpi: float) -> tuple:
    # Text._get_layout's own reading, the same arithmetic in the same order (the same floats).
    font = get_font(fontManager._find_fonts_by_props(prop))
    for table_name, linegap_key, ascent_key, descent_key in HEIGHT_TABLES:
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        fontsize = prop.get_size_in_points()
        units_per_em = font.get_sfnt_table("head")["unitsPerEm"]
        scale = 1 / units_per_em * fontsize * dpi / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[linegap_key] * scale
    return None, None, None


# The private methods of matplotlib's renderers and font manager the canvas below calls or overrides.
PRIVATE_METHODS = {
    RendererSVG: (
        "_convert_path",
        "_get_style_dict",
        "_make_id",
        "_get_clip_attrs",
        "_make_flip_transform",
        "_get_style",
    ),
    FontManager: ("_find_fonts_by_props",),
}
BUILDS_ON_PRIVATE = _short_float_fmt is not None and all(
    hasattr(owner, name) for owner, names in PRIVATE_METHODS.items() for name in names
)


def canvas_class() -> type[FigureCanvasAgg]:
    """ReplayingCanvas where this matplotlib has the private pieces it builds on, else matplotlib's own Agg canvas:
    the same files either way (the tests compare them byte for byte), drawn slower by the stock one."""
    return ReplayingCanvas if BUILDS_ON_PRIVATE else FigureCanvasAgg


class ReplayingCanvas(FigureCanvasAgg):
    """An Agg canvas drawing with a TextReplayingRenderer, and its SVG files with a MeasuringOnceSVGRenderer."""

    def get_renderer(self) -> RendererAgg:
        width, height = self.get_width_height(physical=True)
        key = width, height, self.figure.dpi
        if self._lastKey != key:  # as FigureCanvasAgg: one renderer while the size and dpi stay
            self.renderer = TextReplayingRenderer(width, height, self.figure.dpi)
            self._lastKey = key
        self.renderer.figure = self.figure
        return self.renderer

    def print_svg(self, filename, *, bbox_inches_restore=None, metadata=None, **_figure_settings) -> None:
        """FigureCanvasSVG's print_svg, drawing with a MeasuringOnceSVGRenderer. The settings print_figure passes to
        every format (dpi, facecolor...) are applied by print_figure itself: FigureCanvasSVG ignores them too."""
        with cbook.open_file_cm(filename, "w", encoding="utf-8") as file:
            if not cbook.file_requires_unicode(file):
                file = codecs.getwriter("utf-8")(file)
            dpi = self.figure.dpi
            self.figure.dpi = 72  # the SVG's unit is the point
            width, height = self.figure.get_size_inches()
            svg = MeasuringOnceSVGRenderer(width * 72, height * 72, file, image_dpi=dpi, metadata=metadata)
            svg.figure = self.figure
            renderer = MixedModeRenderer(self.figure, width, height, dpi, svg, bbox_inches_restore=bbox_inches_restore)
            self.figure.draw(renderer)
            renderer.finalize()

    filetypes = {**FigureCanvasAgg.filetypes, "svg": FigureCanvasSVG.filetypes["svg"]}


class FontHeightsOnce:
    """A renderer mixin: a font's ascent, descent and line gap read once per process (font_height_metrics)."""

    def _get_font_height_metrics(self, prop):
        # Text._get_layout's hook for a renderer's own font metrics, at the figure's dpi as it reads them itself.
        return font_height_metrics(prop, self.figure.dpi)


class TextReplayingRenderer(FontHeightsOnce, RendererAgg):
    """Agg's renderer, which draws a text met before at the same place from the glyph images FreeType made then.

    Laying a text out and rasterising its glyphs is half of a figure's raster, and most texts come back from one figure
    to the next at the same place: titles, axis labels, keys, tick labels. The pixels are Agg's own: the same
    blending calls with the same glyph images."""

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        # a text's font features or language (matplotlib 3.11) change its shapes: such texts are drawn as usual
        shaped = mtext is not None and any(getattr(mtext, get, lambda: None)() for get in SHAPING_GETTERS)
        if ismath or shaped:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        key = (s, *_font_key(prop), x, y, angle, self.dpi, self.height, gc.get_antialiased())
        glyphs = _drawn_texts.get(key)
        if glyphs is not None:
            for image, left, bottom, image_angle in glyphs:
                self._renderer.draw_text_image(image, left, bottom, image_angle, gc)
            return None
        recorder = GlyphRecorder(self._renderer)
        self._renderer = recorder
        try:
            super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        finally:
            self._renderer = recorder.target
        if recorder.complete:
            _kept(_drawn_texts, key, recorder.glyphs)
        return None


class GlyphRecorder:
    """Stands in for Agg's own renderer while a text is drawn, passing every call on and recording the glyph images;
    a text drawn with any other call is not recorded."""

    def __init__(self, target):
        self.target, self.glyphs, self.complete = target, [], True

    def draw_text_image(self, image, left, bottom, angle, gc) -> None:
        if isinstance(image, np.ndarray):
            self.glyphs.append((image.copy(), left, bottom, angle))
        else:  # matplotlib before 3.11 hands over its font object, not an image
            self.complete = False
        self.target.draw_text_image(image, left, bottom, angle, gc)

    def __getattr__(self, name: str):
        self.complete = False
        return getattr(self.target, name)


class MeasuringOnceSVGRenderer(FontHeightsOnce, RendererSVG):
    """matplotlib's SVG renderer, which measures a text once per process rather than once per file, and writes the
    marks of a line (a run's per-epoch means: thousands of them) working their shared style out once."""

    def __init__(self, width, height, svgwriter, *args, **kwargs):
        self._svg_file = svgwriter
        super().__init__(width, height, svgwriter, *args, **kwargs)

    def get_text_width_height_descent(self, s, prop, ismath):
        if ismath:
            return super().get_text_width_height_descent(s, prop, ismath)
        key = (s, *_font_key(prop))
        size = _svg_text_sizes.get(key)
        if size is None:
            size = _kept(_svg_text_sizes, key, super().get_text_width_height_descent(s, prop, ismath))
        return size

    def draw_markers(self, gc, marker_path, marker_trans, path, trans, rgbFace=None):
        # RendererSVG's own, but the marks' style, the same for each, is worked out once, and _write_uses writes them.
        if not len(path.vertices):
            return
        writer = self.writer
        path_data = self._convert_path(marker_path, marker_trans + Affine2D().scale(1.0, -1.0), simplify=False)
        style = self._get_style_dict(gc, rgbFace)
        dictkey = (path_data, _generate_css(style))
        oid = self._markers.get(dictkey)
        style = _generate_css({k: v for k, v in style.items() if k.startswith("stroke")})
        if oid is None:
            oid = self._make_id("m", dictkey)
            writer.start("defs")
            writer.element("path", id=oid, d=path_data, style=style)
            writer.end("defs")
            self._markers[dictkey] = oid
        writer.start("g", **self._get_clip_attrs(gc))
        if gc.get_url() is not None:
            writer.start("a", {"xlink:href": gc.get_url(), "target": "_blank"})
        clip = (0, 0, self.width * 72, self.height * 72)
        segments = path.iter_segments(self._make_flip_transform(trans), clip=clip, simplify=False)
        places = [vertices[-2:] for vertices, _code in segments if len(vertices)]
        self._write_uses(oid, self._get_style(gc, rgbFace), places)
        if gc.get_url() is not None:
            writer.end("a")
        writer.end("g")

    def _write_uses(self, oid: str, style: str, places: list) -> None:
        """A `<use>` element of the mark `oid` at each place: the first through matplotlib's XML writer, the others as
        copies of its line with their own x and y, written at once (the writer's work per element is most of the
        time of a line of marks)."""
        attrib = {"xlink:href": f"#{oid}", "x": "", "y": "", "style": style}
        for index, (x, y) in enumerate(places):
            attrib["x"], attrib["y"] = _short_float_fmt(x), _short_float_fmt(y)
            self.writer.element("use", attrib=attrib)
            open_tags = getattr(self.writer, "_XMLWriter__tags", None)  # the writer indents one space per open tag
            if index == 0 and open_tags is not None and style and _quote_escape_attrib(style) == f'"{style}"':
                head = f'{" " * min(len(open_tags), 64)}<use xlink:href="#{oid}" x="'
                tail = f'" style="{style}"/>\n'
                self._svg_file.write(
                    "".join(f'{head}{_short_float_fmt(x)}" y="{_short_float_fmt(y)}{tail}' for x, y in places[1:])
                )
                return
