//! The conformance table (cases.rs, limits.rs for several limits per descriptor,
//! multipliers and sliding windows, charges.rs for charges and refunds, and holds.rs for
//! reservations and concurrency slots) on every
//! store configuration ([`setup::Setup`]): one module of tests per configuration and
//! file, e.g. `cargo test --test conformance cluster::`.

#[path = "../support/mod.rs"]
mod support;

mod setup;

/// Runs the whole table on each `module: Setup`: cases.rs compiled once per
/// configuration as `module`, whose tests build their services on that configuration
/// (looked up by module name in [`SETUPS`]).
macro_rules! on_every_store {
    ($($module:ident, $limits:ident, $charges:ident, $holds:ident: $setup:expr),* $(,)?) => {
        $(
            // Loaded once per configuration on purpose: that is the point of the table.
            #[allow(clippy::duplicate_mod)]
            #[path = "cases.rs"]
            mod $module;
            #[allow(clippy::duplicate_mod)]
            #[path = "limits.rs"]
            mod $limits;
            #[allow(clippy::duplicate_mod)]
            #[path = "charges.rs"]
            mod $charges;
            #[allow(clippy::duplicate_mod)]
            #[path = "holds.rs"]
            mod $holds;
        )*

        /// Each table module's configuration, by module name.
        const SETUPS: &[(&str, setup::Setup)] = &[
            $(
                (stringify!($module), $setup),
                (stringify!($limits), $setup),
                (stringify!($charges), $setup),
                (stringify!($holds), $setup),
            )*
        ];
    };
}

on_every_store! {
    embedded, embedded_limits, embedded_charges, embedded_holds: setup::Setup::Embedded,
    redis, redis_limits, redis_charges, redis_holds: setup::Setup::Redis,
    redis_leased, redis_leased_limits, redis_leased_charges, redis_leased_holds: setup::Setup::RedisLeased,
    local_fallback, local_fallback_limits, local_fallback_charges, local_fallback_holds: setup::Setup::LocalFallback,
    cluster, cluster_limits, cluster_charges, cluster_holds: setup::Setup::Cluster,
}

/// The store configuration of the table module at `module_path` (its `module_path!()`).
pub fn setup_of(module_path: &str) -> setup::Setup {
    let module = module_path.rsplit("::").next().expect("a module path");
    SETUPS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|&(_, setup)| setup)
        .expect("every table module is named in SETUPS")
}
