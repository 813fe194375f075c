//! The page's files, compiled into the binary: the mesh may have no way out to the
//! internet, so nothing is fetched from elsewhere (no fonts, scripts or styles).

/// `GET /` from a browser.
pub const INDEX_HTML: &str = include_str!("assets/index.html");

/// `GET /page/app.js`.
pub const APP_JS: &str = include_str!("assets/app.js");

/// `GET /page/style.css`.
pub const STYLE_CSS: &str = include_str!("assets/style.css");

/// Sent with every page response: the page loads its own script and style and talks to
/// its own origin only, runs no inline script, and cannot be framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; \
     frame-ancestors 'none'; base-uri 'none'";
