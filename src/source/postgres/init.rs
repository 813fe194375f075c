//! `meshlimit db init`: the table, and a trigger that announces every change on the
//! channel, so that a plain `INSERT`, `UPDATE`, `DELETE` or `TRUNCATE` is enough.

use super::PgOptions;
use super::connect::{ident, literal};

/// The statements, in one transaction: safe to run again (the table is kept, the
/// function replaced, the triggers dropped and made anew). The trigger function is
/// named after the table (`<table>_notify`); the payload of each notification is the
/// domain changed (empty for `TRUNCATE`).
pub(super) fn statements(options: &PgOptions) -> String {
    let table = ident(&options.table);
    let function = ident(&format!("{}_notify", options.table));
    let row_trigger = ident(&format!("{}_notify", options.table));
    let truncate_trigger = ident(&format!("{}_notify_truncate", options.table));
    let channel = literal(&options.channel);
    format!(
        "BEGIN;
CREATE TABLE IF NOT EXISTS {table} (domain text PRIMARY KEY, config text NOT NULL);
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $meshlimit$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify({channel}, OLD.domain);
    ELSIF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify({channel}, '');
    ELSE
        PERFORM pg_notify({channel}, NEW.domain);
    END IF;
    RETURN NULL;
END
$meshlimit$;
DROP TRIGGER IF EXISTS {row_trigger} ON {table};
CREATE TRIGGER {row_trigger} AFTER INSERT OR UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {function}();
DROP TRIGGER IF EXISTS {truncate_trigger} ON {table};
CREATE TRIGGER {truncate_trigger} AFTER TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {function}();
COMMIT;"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_the_channel_is_a_string() {
        let sql = statements(&PgOptions {
            url: String::new(),
            table: "limits".into(),
            channel: "limit_changes".into(),
        });
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS \"limits\" (domain text PRIMARY KEY"));
        assert!(sql.contains("PERFORM pg_notify('limit_changes', NEW.domain)"));
        assert!(sql.contains("EXECUTE FUNCTION \"limits_notify\"()"));
        assert!(sql.starts_with("BEGIN;") && sql.ends_with("COMMIT;"));
    }
}
