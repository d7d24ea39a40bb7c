//! Bitmap text for the examples' pictures: plotters' own text needs system fonts or a
//! TrueType file, so labels are drawn with the 8x8 glyphs of the `font8x8` crate. Included by
//! the `ode_fit` and `pinn` examples with `#[path]`.

use plotters::coord::Shift;
use plotters::prelude::*;

/// The width in pixels of `text` drawn at `scale`.
pub fn text_width(text: &str, scale: i32) -> i32 {
    8 * scale * text.chars().count() as i32
}

/// Draws `text`, `scale` pixels per font pixel, its top left corner at `at`.
pub fn pixel_text(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    text: &str,
    at: (i32, i32),
    scale: i32,
    color: RGBColor,
) -> Result<(), Box<dyn std::error::Error>> {
    use font8x8::UnicodeFonts;
    for (i, c) in text.chars().enumerate() {
        let Some(glyph) = font8x8::BASIC_FONTS.get(c) else {
            continue;
        };
        let x0 = at.0 + 8 * scale * i as i32;
        for (row, bits) in glyph.iter().enumerate() {
            for col in 0..8 {
                if bits & (1 << col) != 0 {
                    let x = x0 + col * scale;
                    let y = at.1 + row as i32 * scale;
                    area.draw(&Rectangle::new(
                        [(x, y), (x + scale - 1, y + scale - 1)],
                        color.filled(),
                    ))?;
                }
            }
        }
    }
    Ok(())
}
