//! The Go server's `REDIS_*` variables as one meshlimit Redis URL.

/// The Go server's `REDIS_*` settings as one meshlimit Redis URL.
pub(super) fn redis_url(
    url: &str,
    set: &impl Fn(&str) -> Option<String>,
    flag: &impl Fn(&str) -> bool,
) -> Result<String, String> {
    // Already a URL: take it as it is.
    if url.contains("://") {
        return Ok(url.to_string());
    }
    let master_auth = credentials(set("REDIS_AUTH"));
    let auth = master_auth
        .as_ref()
        .map_or(String::new(), |(user, password)| {
            format!("{user}:{password}@")
        });
    let tls = flag("REDIS_TLS");
    let insecure = if tls && flag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
        "#insecure"
    } else {
        ""
    };
    let s = if tls { "s" } else { "" };
    let kind = set("REDIS_TYPE").unwrap_or_else(|| "single".into());
    match kind.to_ascii_lowercase().as_str() {
        "single" => {
            let socket = set("REDIS_SOCKET_TYPE").unwrap_or_else(|| "unix".into());
            match socket.to_ascii_lowercase().as_str() {
                "tcp" => Ok(format!("redis{s}://{auth}{url}{insecure}")),
                "unix" => {
                    let query = auth_query(master_auth.as_ref(), "user", "pass");
                    Ok(format!("unix://{url}{query}"))
                }
                other => Err(format!("REDIS_SOCKET_TYPE={other}: expected tcp or unix")),
            }
        }
        "cluster" => Ok(format!("redis{s}+cluster://{auth}{url}{insecure}")),
        "sentinel" => {
            // `master,host:port,host:port`.
            let (master, hosts) = url.split_once(',').ok_or(
                "REDIS_TYPE=sentinel: REDIS_URL must be master-name,host:port[,host:port...]",
            )?;
            let query = auth_query(
                credentials(set("REDIS_SENTINEL_AUTH")).as_ref(),
                "sentinel_username",
                "sentinel_password",
            );
            Ok(format!(
                "redis{s}+sentinel://{auth}{hosts}/{master}{query}{insecure}"
            ))
        }
        other => Err(format!(
            "REDIS_TYPE={other}: expected single, sentinel or cluster"
        )),
    }
}

/// A Go `*_AUTH` value, `password` or `user:password`, as (user, password), each
/// percent-encoded; the user may be empty.
fn credentials(value: Option<String>) -> Option<(String, String)> {
    let value = value?;
    let (user, password) = value.split_once(':').unwrap_or(("", &value));
    Some((escape(user), escape(password)))
}

/// `?<user_key>=U&<pass_key>=P` (the user left out when empty), or nothing.
fn auth_query(credentials: Option<&(String, String)>, user_key: &str, pass_key: &str) -> String {
    match credentials {
        None => String::new(),
        Some((user, password)) if user.is_empty() => format!("?{pass_key}={password}"),
        Some((user, password)) => format!("?{user_key}={user}&{pass_key}={password}"),
    }
}

/// Percent-encodes what cannot stand in a URL's user info or query.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
