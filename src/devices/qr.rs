//! The pairing URL as a QR code: SVG for the web app's "pair another device", and text for a
//! terminal (`mediatord pair`). Both draw the same module matrix from the `qrcode` crate.

use qrcode::render::{svg, unicode};
use qrcode::{EcLevel, QrCode};

/// Medium error correction (15%): a phone scanning a screen recovers from glare, and the code of a
/// ~100-character URL stays small enough to scan from across a desk.
const EC_LEVEL: EcLevel = EcLevel::M;

fn code(text: &str) -> Option<QrCode> {
    QrCode::with_error_correction_level(text.as_bytes(), EC_LEVEL).ok()
}

/// A standalone SVG document (dark modules on white, with the quiet zone), or `None` for a text
/// too long for any QR code.
pub fn svg(text: &str) -> Option<String> {
    Some(
        code(text)?
            .render::<svg::Color<'_>>()
            .min_dimensions(240, 240)
            .dark_color(svg::Color("#000000"))
            .light_color(svg::Color("#ffffff"))
            .build(),
    )
}

/// Lines of `█ ▀ ▄` and spaces, two modules per character cell, dark modules drawn as light on
/// dark (so on a dark terminal the code reads as printed: black modules, white margin, the
/// quiet zone included).
pub fn terminal(text: &str) -> Option<String> {
    Some(
        code(text)?
            .render::<unicode::Dense1x2>()
            .dark_color(unicode::Dense1x2::Light)
            .light_color(unicode::Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
    )
}
