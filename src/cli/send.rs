//! `send`: a message's text from the command line, standard input or a file, with its
//! references, persisted through `Store::send`.

use sessionstore::store::Access;
use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use sessionstore::attachments::AttachmentUri;
use sessionstore::model::Role;
use sessionstore::store::Outgoing;
use sessionstore::{Config, SessionId, Store};

use super::output::print_id;
use super::parse_session;

#[derive(Args)]
#[command(group = clap::ArgGroup::new("body").required(true).args(["text", "text_file"]))]
pub struct SendArgs {
    /// The session to send to
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
    /// What the user typed (display text); `-` reads it from standard input
    #[arg(long, value_name = "TEXT")]
    text: Option<String>,
    /// Read the display text from this file, as it is (for text too long for an argument)
    #[arg(long, value_name = "PATH")]
    text_file: Option<PathBuf>,
    /// An attachment URI, as `attach` printed it (repeatable)
    #[arg(long = "attach", value_name = "URI")]
    attach: Vec<String>,
    /// Queue the message mid-turn; `drain` delivers it
    #[arg(long)]
    mid_turn: bool,
    /// The custom-command expansion the model gets instead of the text
    #[arg(long, value_name = "TEXT")]
    expanded: Option<String>,
    /// An audio transcription that came with the message
    #[arg(long, value_name = "TEXT")]
    transcript: Option<String>,
    /// Who wrote the message: a user's message or an assistant's reply (system prompts
    /// are the daemon's, not a user's to store)
    #[arg(long, default_value = "user", value_parser = parse_send_role())]
    role: Role,
}

/// The roles `send` takes: a user's message or an assistant's reply.
fn parse_send_role() -> impl clap::builder::TypedValueParser<Value = Role> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["user", "assistant"]).try_map(|s| s.parse::<Role>())
}

/// The display text, read whole and kept as it is: from the argument, from standard
/// input for `-`, or from a file.
fn body(args: &SendArgs) -> Result<String> {
    match (&args.text, &args.text_file) {
        (Some(t), _) if t == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the text from standard input")?;
            Ok(text)
        }
        (Some(t), _) => Ok(t.clone()),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the text from {}", path.display())),
        (None, None) => unreachable!("clap requires --text or --text-file"),
    }
}

pub async fn send(config: Config, json: bool, args: SendArgs) -> Result<()> {
    // A malformed URI is refused input (exit 3), not a usage mistake, so it is parsed
    // here rather than by clap; still before anything is opened.
    let attach = args
        .attach
        .iter()
        .map(|text| AttachmentUri::parse(text).map_err(sessionstore::Error::from))
        .collect::<Result<Vec<_>, _>>()?;
    let text = body(&args)?;
    let store = Store::open_as(config, Access::Existing).await?;
    let outgoing = Outgoing {
        role: args.role,
        text,
        expanded: args.expanded,
        transcript: args.transcript,
        attach,
        mid_turn: args.mid_turn,
    };
    let message = store.send(args.session, outgoing).await?;
    print_id(json, message.id)
}
