//! Every self-contained black-box test, in one test crate (`cargo test --test it`): each module
//! drives the real `mediatord` binary (or the in-process router) through [`support`].
//!
//! The suites that need npm or PyPI stay separate crates: `tests/e2e.rs` and `tests/fuzz.rs`.

mod support;

mod acp;
mod acp_http;
mod agent_output;
mod agents;
mod architecture;
mod attach;
mod bench_smoke;
mod changes;
mod connect;
mod connections;
mod desk;
mod devices;
mod discovery;
mod durability;
mod echo;
mod events;
mod fanout;
mod fleet;
mod http2;
mod lifecycle;
mod login;
mod metrics;
mod model_reviewers;
mod modes;
mod newcomer;
mod notify;
mod oidc_fixtures;
mod openapi;
mod people;
mod people_doors;
mod perimeter;
mod permissions;
mod questions;
mod quickstart;
mod release;
mod reviewers;
mod rules;
mod sandbox;
mod service;
mod sessions;
mod shell;
mod state_dir;
mod store;
mod terminal;
mod tls;
mod web;
