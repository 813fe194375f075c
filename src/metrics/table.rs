//! Finding a request's rule series: the table of the running config's rules, loaded by
//! every request (one `ArcSwap` load) and rebuilt once by the first request or scrape
//! after a reload.

use std::sync::Arc;

use arc_swap::Guard;

use super::Metrics;
use super::labels::Labels;
use super::rule_stats::RuleStats;
use super::rules::{RuleTable, Rules, TableRef, build_table};
use crate::config::Config;

impl Metrics {
    /// The rules' series for a request decided on `config`.
    pub(crate) fn rules(&self, config: &Arc<Config>) -> Rules<'_> {
        let mut table = self.table.load();
        if !Arc::ptr_eq(&table.config, config) {
            drop(table);
            table = self.refresh();
        }
        let table = if Arc::ptr_eq(&table.config, config) {
            TableRef::Running(table)
        } else {
            // Decided just before a reload swapped the config: rare, and built once.
            TableRef::Replaced(build_table(&self.series, config.clone()))
        };
        Rules {
            metrics: self,
            table,
        }
    }

    /// The table of the running config, rebuilt if the config changed since it was built.
    pub(super) fn refresh(&self) -> Guard<Arc<RuleTable>> {
        let running = self.config.load_full();
        let table = self.table.load();
        if Arc::ptr_eq(&table.config, &running) {
            return table;
        }
        drop(table);
        let _one = self.rebuilding.lock();
        let table = self.table.load();
        if Arc::ptr_eq(&table.config, &running) {
            return table;
        }
        drop(table);
        let table = Arc::new(build_table(&self.series, running));
        self.series.lock().live.keep_only(table.live());
        self.table.store(table);
        self.table.load()
    }

    /// The series named `labels`, created at 0 if new.
    pub(super) fn series(&self, labels: Labels) -> Arc<RuleStats> {
        self.series.lock().get_or_create(labels)
    }
}
