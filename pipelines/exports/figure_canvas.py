"""The Agg canvas the ablation figures are drawn on: matplotlib's own, replaying the glyphs of a text drawn before."""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import fontManager

# Settings of matplotlib's a text's glyph images depend on, besides the text's own (font, size, place, angle).
GLYPH_SETTINGS = ("text.hinting", "text.kerning_factor", "font.enable_last_resort")
DRAWN_TEXTS_KEPT = 4096  # about 70 figures' texts; the oldest are forgotten all at once past it

# A text's glyph images as Agg drew them, by everything they depend on, for every canvas of this process.
_drawn_texts: dict[tuple, list[tuple]] = {}


class ReplayingCanvas(FigureCanvasAgg):
    """An Agg canvas whose renderer is a TextReplayingRenderer."""

    def get_renderer(self) -> RendererAgg:
        width, height = self.get_width_height(physical=True)
        key = width, height, self.figure.dpi
        if self._lastKey != key:  # as FigureCanvasAgg: one renderer while the size and dpi stay
            self.renderer = TextReplayingRenderer(width, height, self.figure.dpi)
            self._lastKey = key
        return self.renderer


class TextReplayingRenderer(RendererAgg):
    """Agg's renderer, which draws a text met before at the same place from the glyph images FreeType made then.

    Laying a text out and rasterising its glyphs is half of a figure's raster, and most texts come back from one figure
    to the next at the same place: titles, axis labels, keys, tick labels. The pixels are Agg's own: the same
    blending calls with the same glyph images."""

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        shaped = mtext is not None and (mtext.get_fontfeatures() or mtext.get_language())
        if ismath or shaped:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        key = (
            s,
            prop.copy(),  # FontProperties hash by their current, mutable state
            tuple(fontManager._find_fonts_by_props(prop)),
            tuple(mpl.rcParams[name] for name in GLYPH_SETTINGS),
            x,
            y,
            angle,
            self.dpi,
            self.height,
            gc.get_antialiased(),
        )
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
            if len(_drawn_texts) >= DRAWN_TEXTS_KEPT:
                _drawn_texts.clear()
            _drawn_texts[key] = recorder.glyphs
        return None


class GlyphRecorder:
    """Stands in for Agg's own renderer while a text is drawn, passing every call on and recording the glyph images;
    a text drawn with any other call is not recorded."""

    def __init__(self, target):
        self.target, self.glyphs, self.complete = target, [], True

    def draw_text_image(self, image, left, bottom, angle, gc) -> None:
        self.glyphs.append((image.copy(), left, bottom, angle))
        self.target.draw_text_image(image, left, bottom, angle, gc)

    def __getattr__(self, name: str):
        self.complete = False
        return getattr(self.target, name)
