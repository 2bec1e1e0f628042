//! The terminal while the client runs: raw mode, the alternate screen and bracketed paste on the
//! way in; on the way out — a quit, an error, a signal or a panic — the same three undone and the
//! cursor shown, so the shell gets its terminal back as it was.

use std::io::{self, Stdout, Write};

use crossterm::cursor::Show;
use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste};
use crossterm::execute;
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// The terminal, taken over; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct Screen {
    pub(crate) terminal: Terminal<CrosstermBackend<Stdout>>,
}

/// Undoes what [`Screen::enter`] did. Safe to call more than once, and from a panic hook.
pub(crate) fn restore() {
    let _ = disable_raw_mode();
    let mut out = io::stdout();
    let _ = execute!(out, DisableBracketedPaste, LeaveAlternateScreen, Show);
    let _ = out.flush();
}

impl Screen {
    pub(crate) fn enter() -> io::Result<Screen> {
        // A panic anywhere restores the terminal before the message is printed, so it is readable.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        enable_raw_mode()?;
        let mut out = io::stdout();
        if let Err(e) = execute!(out, EnterAlternateScreen, EnableBracketedPaste) {
            restore();
            return Err(e);
        }
        match Terminal::new(CrosstermBackend::new(out)) {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
