// Timeline rectangles written straight into pixels. A view of a dense trace fills up to
// 100,000 rectangles a frame, and Canvas2D's fillRect, one call per rectangle, takes far
// longer than a frame for that many; every rectangle of one timeline row covers the same
// lines of pixels, so a row is painted once as a single line and that line copied down.

/** An opaque colour as the 32-bit value an ImageData pixel holds (RGBA bytes, little-endian). */
export function pixel(r: number, g: number, b: number): number {
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
}

/** The pixel value of an HSL colour (hue in degrees, saturation and lightness 0–1). */
export function hslPixel(hue: number, s: number, l: number): number {
  const a = s * Math.min(l, 1 - l);
  const f = (n: number) => {
    const k = (n + hue / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return pixel(f(0), f(8), f(4));
}

/**
 * A frame's timeline rows: ``add`` spans (CSS pixels) to the row whose top is at ``y``;
 * ``paint`` writes every row into the canvas, then the caller draws labels, counters and
 * arrows on top with the 2D context as usual.
 */
export class RowRaster {
  private rows = new Map<number, number[]>();
  private image: ImageData | null = null;
  private line = new Uint32Array(0);

  /** Fill [x0, x1) of the row at ``y`` with ``colour`` (later spans cover earlier ones). */
  add(y: number, x0: number, x1: number, colour: number): void {
    let spans = this.rows.get(y);
    if (spans === undefined) this.rows.set(y, spans = []);
    spans.push(x0, x1, colour);
  }

  /**
   * Paint every row over the whole canvas (which it clears): rows ``top`` to ``bottom`` CSS
   * pixels below each row's ``y``, at the canvas's device-pixel ratio ``dpr``.
   */
  paint(g: CanvasRenderingContext2D, dpr: number, top: number, bottom: number): void {
    const width = g.canvas.width, height = g.canvas.height;
    if (width === 0 || height === 0) {  // nothing to paint (createImageData refuses it)
      this.rows.clear();
      return;
    }
    if (!this.image || this.image.width !== width || this.image.height !== height) {
      this.image = g.createImageData(width, height);
      this.line = new Uint32Array(width);
    }
    const pixels = new Uint32Array(this.image.data.buffer);
    pixels.fill(0);
    const line = this.line;
    for (const [y, spans] of this.rows) {
      const y0 = Math.max(Math.round((y + top) * dpr), 0);
      const y1 = Math.min(Math.round((y + bottom) * dpr), height);
      if (y0 >= y1) continue;
      line.fill(0);
      for (let k = 0; k < spans.length; k += 3) {
        const x0 = Math.max(Math.floor(spans[k] * dpr), 0);
        const x1 = Math.min(Math.max(Math.round(spans[k + 1] * dpr), x0 + 1), width);
        if (x0 < x1) line.fill(spans[k + 2], x0, x1);
      }
      for (let row = y0; row < y1; row++) pixels.set(line, row * width);
    }
    g.putImageData(this.image, 0, 0);
    this.rows.clear();
  }
}
