//! The property tests' runner settings, shared by every `proptest_*` test binary.

use proptest::prelude::ProptestConfig;
use proptest::test_runner::FileFailurePersistence;

/// 256 cases; failures saved next to the test's source, in
/// `<test>.proptest-regressions` (committed: its seeds run first, every time).
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}
