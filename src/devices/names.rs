//! What a device may be called, and how a name recorded before these rules is shown.
//!
//! A name is shown beside votes, in the audit, the web app and `mediatord devices`, where it says
//! who decided. So it must look like what it is: no control characters, no formatting characters
//! (right-to-left and other bidi overrides, zero-width spaces and joiners, the invisible
//! operators), no line or paragraph separators, no space but the plain one (a no-break or
//! ideographic space passes for it), no private-use or unassigned code points (they render as
//! anything a font likes), and at most [`MAX_COMBINING_MARKS`] combining marks on one character
//! (a stack of them paints over the lines around the name).
//!
//! Nor may a name mix scripts: a Cyrillic `а` in `pаypal`, a Greek `ο` in `οperator` look like
//! the Latin letters they replace, so `operator's phone` could be forged beside votes. The rule
//! is Unicode's "highly restrictive" level (UTS #39 §5.2): one script (digits, punctuation,
//! emoji and marks belong to every script), or Latin with the scripts Japanese, Chinese or Korean
//! write together. A name written entirely in another script that looks Latin (`соре`, all
//! Cyrillic) still passes: no rule that keeps every language's names can refuse it; the device's
//! id, which no one chooses, is one tap away on every name the web app shows, in `mediatord audit
//! --ids` and in the CSV export.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
use unicode_script::Script;
use unicode_security::mixed_script::AugmentedScriptSet;

/// Longest device name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Combining marks one character may carry: two cover every accent a script stacks on a letter
/// (Vietnamese, decomposed, puts two on one vowel); more is a stack that paints outside its line.
pub const MAX_COMBINING_MARKS: usize = 2;
/// What a refused character of a name recorded earlier is shown as.
const REPLACEMENT: char = '\u{FFFD}';

/// Whether `c` may appear in a name (on its own: combining marks are counted separately).
fn allowed(c: char) -> bool {
    match c.general_category() {
        GeneralCategory::Control
        | GeneralCategory::Format
        | GeneralCategory::LineSeparator
        | GeneralCategory::ParagraphSeparator
        | GeneralCategory::PrivateUse
        | GeneralCategory::Surrogate
        | GeneralCategory::Unassigned => false,
        GeneralCategory::SpaceSeparator => c == ' ',
        _ => true,
    }
}

fn combining(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::NonspacingMark | GeneralCategory::EnclosingMark | GeneralCategory::SpacingMark
    )
}

/// Whether `name` is written in one script, as UTS #39's "highly restrictive" level counts them
/// (the module's doc).
fn one_script(name: &str) -> bool {
    let mut all = AugmentedScriptSet::default();
    let mut beside_latin = AugmentedScriptSet::default();
    for c in name.chars() {
        let set = AugmentedScriptSet::for_char(c);
        all.intersect_with(set);
        if !set.base.contains_script(Script::Latin) {
            beside_latin.intersect_with(set);
        }
    }
    !all.is_empty() || beside_latin.jpan || beside_latin.hanb || beside_latin.kore
}

/// A name this module refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct InvalidName;

/// A name as given, trimmed; `Err` when empty, too long, or holding a character the module's doc
/// refuses.
pub(super) fn valid_name(name: &str) -> Result<String, InvalidName> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(InvalidName);
    }
    let mut marks = 0;
    for (i, c) in name.chars().enumerate() {
        if !allowed(c) {
            return Err(InvalidName);
        }
        if combining(c) {
            marks += 1;
            // A mark needs a character to sit on, and only so many fit.
            if i == 0 || marks > MAX_COMBINING_MARKS {
                return Err(InvalidName);
            }
        } else {
            marks = 0;
        }
    }
    if !one_script(name) {
        return Err(InvalidName);
    }
    Ok(name.to_owned())
}

/// `name` with every character [`valid_name`] refuses replaced by U+FFFD, combining marks past
/// the limit dropped, and every letter of a script other than its first one's replaced by U+FFFD:
/// how a name recorded by an earlier version is shown (it is never shown as it was).
pub fn neutralised(name: &str) -> String {
    if valid_name(name).is_ok_and(|n| n == name) {
        return name.to_owned();
    }
    let mut out = String::with_capacity(name.len());
    let mut marks = 0;
    // The scripts of the letters kept so far: a letter that shares none of them is replaced.
    let mut scripts = AugmentedScriptSet::default();
    for c in name.chars().take(MAX_NAME_CHARS) {
        let mut with_c = scripts;
        with_c.intersect_with(AugmentedScriptSet::for_char(c));
        if !allowed(c) || with_c.is_empty() {
            out.push(REPLACEMENT);
            marks = 0;
        } else if combining(c) {
            marks += 1;
            if !out.is_empty() && marks <= MAX_COMBINING_MARKS {
                out.push(c);
            }
        } else {
            marks = 0;
            scripts = with_c;
            out.push(c);
        }
    }
    match out.trim() {
        "" => REPLACEMENT.to_string(),
        trimmed => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_in_any_script_pass_trimmed() {
        for name in
            ["phone", "Ann's laptop", "téléphone", "Tiếng Việt", "手机", "телефон", "हिन्दी फ़ोन", "📱 2"]
        {
            assert_eq!(valid_name(&format!("  {name} ")).as_deref(), Ok(name), "{name}");
        }
        // Latin beside the scripts Japanese, Chinese and Korean write with it.
        for name in ["iPhone 手机", "Pixel のスマホ", "갤럭시 Tab 3", "ㄅㄆ 手机"] {
            assert_eq!(valid_name(name).as_deref(), Ok(name), "{name}");
        }
        // Decomposed: e + circumflex + acute, two marks on one letter.
        assert!(valid_name("Vie\u{0302}\u{0301}t").is_ok());
        assert!(valid_name(&"x".repeat(MAX_NAME_CHARS)).is_ok());
    }

    #[test]
    fn controls_bidi_overrides_invisibles_odd_spaces_and_mark_stacks_are_refused() {
        let refused = [
            "",
            "   ",
            "a\nb",
            "a\u{7}b",
            "admin\u{202E}enohp", // right-to-left override
            "a\u{2066}b\u{2069}", // isolates
            "a\u{200F}b",         // right-to-left mark
            "ali\u{200B}ce",      // zero-width space
            "ali\u{200D}ce",      // zero-width joiner
            "a\u{2060}b",         // word joiner
            "a\u{FEFF}b",         // byte order mark
            "a\u{00A0}b",         // no-break space
            "a\u{3000}b",         // ideographic space
            "a\u{2028}b",         // line separator
            "a\u{E000}b",         // private use
            "\u{0301}a",          // a mark with nothing to sit on
            "Z\u{0301}\u{0302}\u{0303}algo",
            "p\u{0430}ypal",           // a Cyrillic a among Latin letters
            "\u{03BF}perator's phone", // a Greek omicron for the o
            "laptop \u{0430}",         // Latin, then a Cyrillic word
            "телефон phone",           // Cyrillic beside Latin
            "\u{0440}hone \u{03B1}",   // Cyrillic and Greek
            "手机 телефон",            // Han beside Cyrillic
        ];
        for name in refused {
            assert_eq!(valid_name(name), Err(InvalidName), "{name:?}");
        }
        assert_eq!(valid_name(&"x".repeat(MAX_NAME_CHARS + 1)), Err(InvalidName));
    }

    #[test]
    fn a_name_recorded_earlier_is_shown_neutralised() {
        assert_eq!(neutralised("phone"), "phone");
        assert_eq!(neutralised("  phone "), "phone", "trimmed, as a name given now is");
        assert_eq!(neutralised("admin\u{202E}enohp"), "admin\u{FFFD}enohp");
        assert_eq!(neutralised("Z\u{0301}\u{0302}\u{0303}\u{0304}x"), "Z\u{0301}\u{0302}x");
        assert_eq!(neutralised("\u{0301}\u{0301}a"), "a");
        assert_eq!(neutralised("\u{200B}"), "\u{FFFD}");
        assert_eq!(neutralised(&"y".repeat(MAX_NAME_CHARS + 9)).chars().count(), MAX_NAME_CHARS);
        // A name that mixed scripts keeps its first script's letters.
        assert_eq!(neutralised("p\u{0430}ypal"), "p\u{FFFD}ypal");
        assert_eq!(neutralised("\u{0430}pple 2"), "\u{0430}\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD} 2");
        assert_eq!(neutralised("iPhone 手机"), "iPhone 手机", "allowed now, shown as it is");
        for shown in
            ["admin\u{202E}enohp", "a\nb", "Z\u{0301}\u{0302}\u{0303}", "p\u{0430}ypal", "\u{0430}pple"]
        {
            assert!(valid_name(&neutralised(shown)).is_ok(), "{shown:?}");
        }
    }
}
