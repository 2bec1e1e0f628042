//! `mediatord-fake-model`: the fake model server on a loopback port, for running an agent by hand.

use std::io::IsTerminal as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::Parser;
use mediatord_fake_model::{Fake, serve};

/// An offline, scripted model server: OpenAI Chat Completions (`<url>/v1`, e.g. Qwen Code's
/// OPENAI_BASE_URL), Anthropic Messages (`<url>`, e.g. Claude Code's ANTHROPIC_BASE_URL) and Gemini
/// generateContent (`<url>`, e.g. Gemini CLI's GOOGLE_GEMINI_BASE_URL). Prompt
/// lines `WRITE <abs-path> <text>`, `SHELL <command>`, `STREAM <n>`, `STALL [seconds]` script the
/// reply; anything else gets "Hello from the fake model.".
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one; the startup line says which).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Append every request body to this file, one JSON line each.
    #[arg(long, value_name = "FILE")]
    dump: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "fake_model=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let fake = Fake::new(args.dump)?;
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, args.port)).await?;
    println!("mediatord-fake-model listening on http://{}", listener.local_addr()?);
    serve(listener, fake, async {
        _ = tokio::signal::ctrl_c().await;
    })
    .await
}
