//! The conformance table (cases.rs) on every store configuration ([`setup::Setup`]): one
//! module of tests per configuration, e.g. `cargo test --test conformance cluster::`.

#[path = "../support/mod.rs"]
mod support;

mod setup;

/// Runs the whole table on each `module: Setup`: cases.rs compiled once per
/// configuration as `module`, whose tests build their services on that configuration
/// (looked up by module name in [`SETUPS`]).
macro_rules! on_every_store {
    ($($module:ident: $setup:expr),* $(,)?) => {
        $(
            // Loaded once per configuration on purpose: that is the point of the table.
            #[allow(clippy::duplicate_mod)]
            #[path = "cases.rs"]
            mod $module;
        )*

        /// Each table module's configuration, by module name.
        const SETUPS: &[(&str, setup::Setup)] = &[$((stringify!($module), $setup)),*];
    };
}

on_every_store! {
    embedded: setup::Setup::Embedded,
    redis: setup::Setup::Redis,
    redis_leased: setup::Setup::RedisLeased,
    local_fallback: setup::Setup::LocalFallback,
    cluster: setup::Setup::Cluster,
}
