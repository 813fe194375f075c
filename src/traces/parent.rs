//! The caller's span, from a request's headers: W3C trace context (`traceparent`,
//! `tracestate`), else B3 (the single `b3` header, else `x-b3-traceid` and its fellows).
//! Envoy sends whichever its tracer speaks: `traceparent` from its OpenTelemetry tracer,
//! B3 from its Zipkin tracer.
//!
//! Read here rather than by OpenTelemetry's propagators: the SDK's W3C propagator splits
//! the header into a vector and builds a context, an allocation for a call that is then
//! not sampled, and the one Rust B3 propagator (opentelemetry-zipkin's) is deprecated with
//! its crate. The rules are theirs: W3C's as the SDK reads it (lowercase hex, version 0
//! with exactly four fields, later versions with more, `ff` refused; only the sampled flag
//! kept), B3's as its specification writes it (github.com/openzipkin/b3-propagation).
//! `tracestate` is read only for a sampled parent, whose span carries it on.

use std::str::FromStr;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// W3C's header naming the caller's span, and its vendors' state.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
/// B3's single header.
const B3: HeaderName = HeaderName::from_static("b3");
/// B3's multi-header form: the trace, the caller's span, its sampling decision, debug.
const X_B3_TRACE_ID: HeaderName = HeaderName::from_static("x-b3-traceid");
const X_B3_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-spanid");
const X_B3_SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");
const X_B3_FLAGS: HeaderName = HeaderName::from_static("x-b3-flags");

/// The caller's span context, when the headers name a valid one.
pub(super) fn span_context(headers: &HeaderMap) -> Option<SpanContext> {
    let traceparent = headers.get(TRACEPARENT).map(HeaderValue::as_bytes);
    if let Some(found) = traceparent.and_then(|v| w3c(v, headers)) {
        return Some(found);
    }
    // A malformed single header leaves the multi-header form to answer, as B3 says.
    if let Some(found) = text(headers, &B3).and_then(b3_single) {
        return Some(found);
    }
    let trace = text(headers, &X_B3_TRACE_ID)?;
    let span = text(headers, &X_B3_SPAN_ID)?;
    let debug = text(headers, &X_B3_FLAGS) == Some("1");
    let sampled = match text(headers, &X_B3_SAMPLED) {
        Some(value) => Some(b3_sampled(value)?),
        None => None,
    };
    b3_context(trace, span, debug || sampled == Some(true))
}

/// A `traceparent` value: `{version}-{trace}-{span}-{flags}`, then the sampled parent's
/// `tracestate` from `headers`. Read from fixed offsets, for a call that is then not
/// sampled costs only this.
fn w3c(value: &[u8], headers: &HeaderMap) -> Option<SpanContext> {
    let value = value.trim_ascii();
    let field = |from: usize, to: usize| value.get(from..to);
    let dashes = [2, 35, 52].iter().all(|&at| value.get(at) == Some(&b'-'));
    let version = hex_id::<1>(field(0, 2)?)?[0];
    // Version 0 has four fields; a later one may have more, after a dash; 255 is invalid.
    let rest_ok = match value.len() {
        55 => true,
        _ => version != 0 && value.get(55) == Some(&b'-'),
    };
    if !dashes || !rest_ok || version == 0xff {
        return None;
    }
    let trace = hex_id::<16>(field(3, 35)?)?;
    let span = hex_id::<8>(field(36, 52)?)?;
    let sampled = hex_id::<1>(field(53, 55)?)?[0] & TraceFlags::SAMPLED.to_u8() != 0;
    let state = if sampled {
        text(headers, &TRACESTATE)
            .and_then(|state| TraceState::from_str(state).ok())
            .unwrap_or_default()
    } else {
        TraceState::default()
    };
    remote(
        u128::from_be_bytes(trace),
        u64::from_be_bytes(span),
        sampled,
        state,
    )
}

/// The single `b3` header: `{trace}-{span}[-{sampling}[-{parent span}]]`; a lone
/// sampling decision names no span.
fn b3_single(value: &str) -> Option<SpanContext> {
    let mut parts = value.split('-');
    let (trace, span) = (parts.next()?, parts.next()?);
    let sampled = match parts.next() {
        Some("d") => true,
        Some(sampling) => b3_sampled(sampling)?,
        None => false,
    };
    if let Some(parent) = parts.next() {
        hex_id::<8>(parent.as_bytes())?;
    }
    if parts.next().is_some() {
        return None;
    }
    b3_context(trace, span, sampled)
}

/// A B3 sampling decision: `1` or `true` is sampled, `0` or `false` is not.
fn b3_sampled(value: &str) -> Option<bool> {
    match value {
        "1" | "true" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

/// A remote span context from B3's ids (a 64-bit trace id is the low half of a 128-bit
/// one), if they are lowercase hex of the right lengths and not zero.
fn b3_context(trace: &str, span: &str, sampled: bool) -> Option<SpanContext> {
    let trace = match trace.len() {
        16 => u128::from(u64::from_be_bytes(hex_id::<8>(trace.as_bytes())?)),
        _ => u128::from_be_bytes(hex_id::<16>(trace.as_bytes())?),
    };
    let span = u64::from_be_bytes(hex_id::<8>(span.as_bytes())?);
    remote(trace, span, sampled, TraceState::default())
}

/// A remote span context, if its ids are not zero.
fn remote(trace: u128, span: u64, sampled: bool, state: TraceState) -> Option<SpanContext> {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let context = SpanContext::new(TraceId::from(trace), SpanId::from(span), flags, true, state);
    context.is_valid().then_some(context)
}

/// `N` bytes written as `2 * N` lowercase hex digits.
fn hex_id<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != 2 * N {
        return None;
    }
    let mut bytes = [0; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (lower_hex(pair[0])? << 4) | lower_hex(pair[1])?;
    }
    Some(bytes)
}

/// One lowercase hex digit's value.
fn lower_hex(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

/// A header's value, if it is text.
fn text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    fn ids(context: &SpanContext) -> (TraceId, SpanId) {
        (context.trace_id(), context.span_id())
    }

    fn expected() -> (TraceId, SpanId) {
        (
            TraceId::from_hex(TRACE).unwrap(),
            SpanId::from_hex(SPAN).unwrap(),
        )
    }

    #[test]
    fn traceparent_names_the_parent_and_its_sampling() {
        let sampled = headers(&[(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )]);
        let parent = span_context(&sampled).expect("a parent");
        assert_eq!(ids(&parent), expected());
        assert!(parent.is_sampled() && parent.is_remote());
        let unsampled = headers(&[(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        )]);
        assert!(!span_context(&unsampled).expect("a parent").is_sampled());
    }

    #[test]
    fn traceparent_versions_case_and_tracestate() {
        let parent = |value: &'static str| span_context(&headers(&[("traceparent", value)]));
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert_eq!(ids(&parent(later).expect("a later version")), expected());
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            assert!(parent(bad).is_none(), "{bad}");
        }
        // Unknown flags are dropped, the sampled one kept.
        let flags = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03";
        assert_eq!(parent(flags).unwrap().trace_flags(), TraceFlags::SAMPLED);
        let with_state = headers(&[
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("tracestate", "vendor=value"),
        ]);
        let state = span_context(&with_state).unwrap().trace_state().clone();
        assert_eq!(state.get("vendor"), Some("value"));
    }

    #[test]
    fn b3_single_and_multi_headers_name_the_parent() {
        let single = headers(&[("b3", "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1")]);
        let parent = span_context(&single).expect("a parent");
        assert_eq!(ids(&parent), expected());
        assert!(parent.is_sampled());
        let multi = headers(&[
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", SPAN),
            ("x-b3-sampled", "0"),
        ]);
        let parent = span_context(&multi).expect("a parent");
        assert_eq!(ids(&parent), expected());
        assert!(!parent.is_sampled());
    }

    #[test]
    fn no_or_malformed_headers_name_no_parent() {
        assert!(span_context(&HeaderMap::new()).is_none());
        assert!(span_context(&headers(&[("traceparent", "00-zz-00f067aa0ba902b7-01")])).is_none());
        assert!(span_context(&headers(&[("x-b3-traceid", TRACE)])).is_none());
        let zero = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        assert!(span_context(&headers(&[("traceparent", zero)])).is_none());
    }

    #[test]
    fn b3_forms_as_the_specification_writes_them() {
        let short = headers(&[("b3", "a3ce929d0e0e4736-00f067aa0ba902b7-d-0000000000000001")]);
        let parent = span_context(&short).expect("a 64-bit trace id");
        assert_eq!(
            parent.trace_id(),
            TraceId::from_hex("0000000000000000a3ce929d0e0e4736").unwrap()
        );
        assert!(parent.is_sampled(), "debug is sampled");
        let deferred = headers(&[("b3", "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7")]);
        assert!(!span_context(&deferred).expect("a parent").is_sampled());
        for bad in [
            "0",
            "4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-1",
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-2",
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902-1",
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1-x-y",
            "4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-1",
        ] {
            let single = [("b3", bad)];
            assert!(span_context(&headers(&single)).is_none(), "{bad}");
        }
        let debug_flag = headers(&[
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", SPAN),
            ("x-b3-flags", "1"),
        ]);
        assert!(span_context(&debug_flag).expect("a parent").is_sampled());
        let bad_single_good_multi = headers(&[
            ("b3", "nonsense"),
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", SPAN),
            ("x-b3-sampled", "1"),
        ]);
        assert_eq!(
            ids(&span_context(&bad_single_good_multi).unwrap()),
            expected()
        );
    }

    #[test]
    fn a_malformed_traceparent_leaves_b3_to_answer() {
        let both = headers(&[
            ("traceparent", "garbage"),
            ("b3", "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"),
        ]);
        assert_eq!(ids(&span_context(&both).expect("b3's parent")), expected());
    }
}
