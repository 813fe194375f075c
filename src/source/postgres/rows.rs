//! The rows of the config table → a validated [`Config`]: each row is one domain file,
//! named `postgres:<table>/<domain>` so that its problems read like a file's.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::config::{Config, SharedDomains};
use crate::error::{ConfigError, ConfigErrorKind};

/// One row of the config table as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Row {
    /// The `domain` column.
    pub(super) domain: String,
    /// The `config` column, one domain file's YAML; `None` for SQL NULL (only possible
    /// in a table not made by `meshlimit db init`).
    pub(super) config: Option<String>,
}

/// The name a row's problems are reported under: `postgres:<table>/<domain>`.
pub(super) fn row_name(table: &str, domain: &str) -> PathBuf {
    PathBuf::from(format!("postgres:{table}/{domain}"))
}

/// Validates every row of `table` as one config; each row's YAML must name the domain of
/// its `domain` column.
///
/// # Errors
/// Every problem of every row.
pub(super) fn config_from_rows(table: &str, rows: &[Row]) -> Result<Config, Vec<ConfigError>> {
    let mut sources = Vec::with_capacity(rows.len());
    let mut columns = HashMap::with_capacity(rows.len());
    let mut errors = Vec::new();
    for row in rows {
        let name = row_name(table, &row.domain);
        match &row.config {
            Some(text) => {
                columns.insert(name.clone(), row.domain.as_str());
                sources.push((name, text.clone()));
            }
            None => errors.push(ConfigError::new(
                ConfigErrorKind::Unreadable,
                &name,
                None,
                None,
                "the config column is NULL",
            )),
        }
    }
    let checked = Config::from_sources_checked(&sources, SharedDomains::Refused, |file, yaml| {
        let column = columns.get(file).copied().unwrap_or_default();
        (yaml != column).then(|| {
            ConfigError::new(
                ConfigErrorKind::RowDomainMismatch,
                file,
                None,
                None,
                format!(
                    "the row's domain column is '{column}' but its YAML says domain: {yaml}; \
                     they must be the same"
                ),
            )
        })
    });
    match checked {
        Ok(config) if errors.is_empty() => Ok(config),
        Ok(_) => Err(errors),
        Err(found) => {
            errors.extend(found);
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(domain: &str, config: &str) -> Row {
        Row {
            domain: domain.into(),
            config: Some(config.into()),
        }
    }

    const TRADING: &str = "domain: trading\ndescriptors:\n  - key: user_id\n    \
                           rate_limit: {unit: second, requests_per_unit: 5}\n";

    #[test]
    fn rows_become_one_config() {
        let rows = [row("trading", TRADING), row("empty", "domain: empty\n")];
        let config = config_from_rows("meshlimit_config", &rows).unwrap();
        assert_eq!(config.domains(), ["empty", "trading"]);
        assert_eq!(config.rules().len(), 1);
        assert!(config_from_rows("t", &[]).unwrap().domains().is_empty());
    }

    #[test]
    fn problems_name_the_row_like_a_file() {
        let bad = "domain: trading\ndescriptors:\n  - key: user_id\n    x: 1\n";
        let errors = config_from_rows("meshlimit_config", &[row("trading", bad)]).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].kind, ConfigErrorKind::UnknownKey);
        let text = errors[0].to_string();
        assert!(
            text.starts_with("postgres:meshlimit_config/trading:4: descriptor 'trading.user_id'"),
            "{text}"
        );
    }

    #[test]
    fn a_row_must_hold_its_own_domain() {
        let rows = [row("orders", TRADING), row("ok", "domain: ok\n")];
        let errors = config_from_rows("limits", &rows).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].kind, ConfigErrorKind::RowDomainMismatch);
        assert_eq!(
            errors[0].to_string(),
            "postgres:limits/orders: the row's domain column is 'orders' but its YAML says \
             domain: trading; they must be the same"
        );
    }

    #[test]
    fn a_null_config_is_a_problem_of_its_row() {
        let rows = [Row {
            domain: "x".into(),
            config: None,
        }];
        let errors = config_from_rows("t", &rows).unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "postgres:t/x: the config column is NULL"
        );
    }
}
