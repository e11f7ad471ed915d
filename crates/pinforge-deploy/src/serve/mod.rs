//! The serving path (issue #20): what pinforge needs to drive a real `llama-server` in router
//! mode, in parts that do not need a running server and are tested on their own: the preset
//! file and router command line it writes ([`preset`]), the reader of an OpenAI
//! chat-completions SSE stream that tells a complete stream from one cut off by a dying child
//! ([`sse`]), and the process group a server runs in, stopped with every child it started
//! ([`group`]).
//!
//! The HTTP side of a server ([`client`]: health wait, chat completions, `/models`, `/props`)
//! is here too; the row loop that drives them is `trial::validate::served`. Starting a server
//! pinforge owns, from its recorded bytes and with nothing else answering for it, is
//! [`launch`]; the `install --smoke` check that a build's server answers one request before a
//! swap is [`gate`].

pub mod client;
pub mod gate;
pub mod group;
pub(crate) mod launch;
pub mod preset;
pub(crate) mod sse;
