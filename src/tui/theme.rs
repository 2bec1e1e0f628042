//! How the terminal client looks: one style per role, in colour or, under `NO_COLOR`
//! (<https://no-color.org>), with bold, dim, italic, underline and reverse only.

use ratatui::style::{Color, Modifier, Style};

/// The styles of every role on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Theme {
    colour: bool,
}

// Every role is a method of the theme, whether or not colour changes it, so a caller never
// needs to know which ones do.
#[allow(clippy::unused_self)]
impl Theme {
    /// Colour unless `no_color` (the value of `NO_COLOR`) is set and non-empty.
    pub(crate) fn from_env(no_color: Option<&str>) -> Theme {
        Theme { colour: no_color.is_none_or(str::is_empty) }
    }

    #[cfg(test)]
    pub(crate) const COLOUR: Theme = Theme { colour: true };
    #[cfg(test)]
    pub(crate) const PLAIN: Theme = Theme { colour: false };

    fn pick(self, colour: Style, plain: Style) -> Style {
        if self.colour { colour } else { plain }
    }

    fn fg(self, c: Color, plain: Style) -> Style {
        self.pick(Style::new().fg(c), plain)
    }

    pub(crate) fn text(self) -> Style {
        Style::new()
    }
    pub(crate) fn dim(self) -> Style {
        self.fg(Color::DarkGray, Style::new().add_modifier(Modifier::DIM))
    }
    pub(crate) fn bold(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub(crate) fn italic(self) -> Style {
        Style::new().add_modifier(Modifier::ITALIC)
    }
    pub(crate) fn heading(self) -> Style {
        self.fg(Color::Cyan, Style::new()).add_modifier(Modifier::BOLD)
    }
    pub(crate) fn code(self) -> Style {
        self.fg(Color::Yellow, Style::new())
    }
    pub(crate) fn link(self) -> Style {
        self.fg(Color::Blue, Style::new()).add_modifier(Modifier::UNDERLINED)
    }
    pub(crate) fn user(self) -> Style {
        self.fg(Color::Green, Style::new()).add_modifier(Modifier::BOLD)
    }
    pub(crate) fn thought(self) -> Style {
        self.fg(Color::DarkGray, Style::new().add_modifier(Modifier::DIM)).add_modifier(Modifier::ITALIC)
    }
    pub(crate) fn added(self) -> Style {
        self.fg(Color::Green, Style::new())
    }
    pub(crate) fn removed(self) -> Style {
        self.fg(Color::Red, Style::new())
    }
    pub(crate) fn hunk(self) -> Style {
        self.fg(Color::Cyan, Style::new().add_modifier(Modifier::DIM))
    }
    /// Words of the client itself inside someone else's text (escapes, counts of what was cut).
    pub(crate) fn mark(self) -> Style {
        self.fg(Color::Yellow, Style::new()).add_modifier(Modifier::REVERSED)
    }
    pub(crate) fn ok(self) -> Style {
        self.fg(Color::Green, Style::new().add_modifier(Modifier::BOLD))
    }
    pub(crate) fn warn(self) -> Style {
        self.fg(Color::Yellow, Style::new().add_modifier(Modifier::BOLD))
    }
    pub(crate) fn error(self) -> Style {
        self.fg(Color::Red, Style::new()).add_modifier(Modifier::BOLD)
    }
    /// The bar at the top and the key line at the bottom.
    pub(crate) fn bar(self) -> Style {
        self.pick(
            Style::new().bg(Color::Blue).fg(Color::White),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }
    /// A key on the card (`a`), so it stands out from the words around it.
    pub(crate) fn key(self) -> Style {
        self.fg(Color::Yellow, Style::new()).add_modifier(Modifier::BOLD)
    }
    /// The highlighted option or list row.
    pub(crate) fn selected(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
    /// The permission card's frame.
    pub(crate) fn card(self) -> Style {
        self.fg(Color::Yellow, Style::new().add_modifier(Modifier::BOLD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_set_and_non_empty_turns_colour_off() {
        assert_eq!(Theme::from_env(None), Theme::COLOUR);
        assert_eq!(Theme::from_env(Some("")), Theme::COLOUR);
        assert_eq!(Theme::from_env(Some("1")), Theme::PLAIN);
        for style in
            [Theme::PLAIN.added(), Theme::PLAIN.removed(), Theme::PLAIN.bar(), Theme::PLAIN.heading()]
        {
            assert_eq!((style.fg, style.bg), (None, None), "{style:?}");
        }
        assert_ne!(Theme::COLOUR.added().fg, None);
    }
}
