//! The serving path (issue #20): what pinforge needs to drive a real `llama-server` in router
//! mode, in parts that do not need a running server and are tested on their own: the preset
//! file and router command line it writes ([`preset`]), the reader of an OpenAI
//! chat-completions SSE stream that tells a complete stream from one cut off by a dying child
//! ([`sse`]), and the process group a server runs in, stopped with every child it started
//! ([`group`]).
//!
//! Not here yet (see the branch's report): the HTTP client, the router's health wait, Ctrl-C
//! handling and the identity checks. Until the row loop that uses these parts lands, the items
//! are only reached from their tests.

pub(crate) mod group;
pub(crate) mod preset;
pub(crate) mod sse;
