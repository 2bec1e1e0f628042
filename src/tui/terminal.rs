//! The terminal while the client runs: raw mode, the alternate screen and bracketed paste on the
//! way in; on the way out — a quit, an error, a signal or a panic — the same three undone and the
//! cursor shown, so the shell gets its terminal back as it was. Each frame reaches the terminal
//! whole: buffered, and bracketed as a synchronized update for the terminals that honour one.

use std::io::{self, BufWriter, Stdout, Write};

use crossterm::cursor::Show;
use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste};
use crossterm::terminal::{
    BeginSynchronizedUpdate, EndSynchronizedUpdate, EnterAlternateScreen, LeaveAlternateScreen,
    disable_raw_mode, enable_raw_mode,
};
use crossterm::{execute, queue};
use ratatui::backend::CrosstermBackend;
use ratatui::{Frame, Terminal};

/// Bytes of a frame held before they are written. Standard output alone flushes every KiB, so a
/// large redraw reached the terminal in pieces and a half-drawn screen showed (a new card's title
/// over the old card's rows); a full 300-column frame with its colours fits.
const FRAME_BUFFER: usize = 256 * 1024;

/// The terminal, taken over; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct Screen {
    terminal: Terminal<CrosstermBackend<BufWriter<Stdout>>>,
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
        match Terminal::new(CrosstermBackend::new(BufWriter::with_capacity(FRAME_BUFFER, out))) {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Draws one frame and writes it at once, inside a synchronized update (terminals that do not
    /// know the sequence ignore it).
    pub(crate) fn draw(&mut self, render: impl FnOnce(&mut Frame<'_>)) -> io::Result<()> {
        queue!(self.terminal.backend_mut(), BeginSynchronizedUpdate)?;
        self.terminal.draw(render)?;
        execute!(self.terminal.backend_mut(), EndSynchronizedUpdate)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
