//! One integration-test binary for the chat channels: [`claw_channels::Channels`]
//! started in-process against real network peers (a scripted Telegram Bot API
//! server, a real Synapse), with a scripted assistant in place of the gateway.
#![allow(clippy::unwrap_used)]

mod common;
mod matrix;
mod telegram;
