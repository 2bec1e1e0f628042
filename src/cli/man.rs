//! `mediatord man` and `mediatord completions`: the command line's pages and completion scripts.

use std::process::ExitCode;

use clap::CommandFactory;

use super::{ABOUT, Cli};

/// `mediatord completions SHELL`: the script on stdout.
pub(super) fn completions(shell: clap_complete::Shell) -> ExitCode {
    clap_complete::generate(shell, &mut visible_cli(), "mediatord", &mut std::io::stdout());
    ExitCode::SUCCESS
}

/// The command line as users see it. clap_complete offers hidden subcommands too, and clap cannot
/// remove one, so completions are generated from a copy without the internal `agent-guard`.
fn visible_cli() -> clap::Command {
    let full = Cli::command();
    let visible: Vec<clap::Command> = full.get_subcommands().filter(|c| !c.is_hide_set()).cloned().collect();
    clap::Command::new("mediatord").version(env!("CARGO_PKG_VERSION")).about(ABOUT).subcommands(visible)
}

/// Writes the man page of `mediatord` or of one of its (visible) subcommands to stdout.
pub(super) fn man_page(subcommand: Option<&str>) -> ExitCode {
    let mut cli = Cli::command();
    // Building names each subcommand `mediatord-<name>`, the title of its page.
    cli.build();
    let page = match subcommand {
        None => cli,
        Some(name) => match cli.get_subcommands().find(|c| c.get_name() == name && !c.is_hide_set()) {
            Some(sub) => sub.clone(),
            None => {
                let names: Vec<&str> =
                    cli.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name()).collect();
                eprintln!("mediatord man: no subcommand {name:?} (expected one of: {})", names.join(", "));
                return ExitCode::from(2);
            }
        },
    };
    // The footer names the program and its version on every page; clap_mangen would take the
    // subcommand's own name and version (`serve ` on mediatord-serve(1): no version of its own).
    let source = format!("mediatord {}", env!("CARGO_PKG_VERSION"));
    match clap_mangen::Man::new(page).source(source).render(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mediatord man: {e}");
            ExitCode::FAILURE
        }
    }
}
