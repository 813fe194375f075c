//! A snapshot's resources → a validated [`Config`]: each `RateLimitConfig` becomes the
//! text of a descriptor file (JSON, which the YAML parser reads) named
//! `xds:<resource name>`, and the files go through [`Config::from_sources`], so that a
//! resource is validated exactly as a file is.
//!
//! The message has no `burst` or `algorithm`: rules take the `--algorithm` default and a
//! burst of `requests_per_unit`. Line numbers would point into the generated text, so
//! errors lose them: `xds:<resource name>: descriptor '…': message`.

use std::path::{Path, PathBuf};

use envoy_types::pb::google::protobuf::{Any, Struct, Value, value::Kind};
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use serde_json::{Map, Value as Json, json};

use super::TYPE_URL;
use crate::config::{Config, SharedDomains};
use crate::error::{ConfigError, ConfigErrorKind};

/// Validates a snapshot's resources as one config.
///
/// # Errors
/// Every problem: resources of another type or that cannot be decoded, and every rule
/// error of every resource.
pub(super) fn config(
    resources: &[Any],
    domains: SharedDomains,
) -> Result<Config, Vec<ConfigError>> {
    let mut sources = Vec::with_capacity(resources.len());
    let mut errors = Vec::new();
    for (index, any) in resources.iter().enumerate() {
        match decode(any) {
            Ok(resource) => sources.push((file_name(&resource, index), descriptor_file(&resource))),
            Err(message) => errors.push(ConfigError::new(
                ConfigErrorKind::BadResource,
                Path::new(&format!("xds:#{index}")),
                None,
                None,
                message,
            )),
        }
    }
    let checked = Config::from_sources_checked(&sources, domains, |_, _| None);
    match checked {
        Ok(config) if errors.is_empty() => Ok(config),
        Ok(_) => Err(errors),
        Err(found) => {
            errors.extend(found.into_iter().map(|e| ConfigError { line: None, ..e }));
            Err(errors)
        }
    }
}

/// One resource as a `RateLimitConfig`.
fn decode(any: &Any) -> Result<RateLimitConfig, String> {
    if any.type_url != TYPE_URL {
        return Err(format!(
            "resource of type {:?}: only {TYPE_URL} is subscribed to",
            any.type_url
        ));
    }
    RateLimitConfig::decode(any.value.as_slice())
        .map_err(|e| format!("resource cannot be decoded as a RateLimitConfig: {e}"))
}

/// `xds:<resource name>`; a resource without a name is named by its domain, or by its
/// place in the response.
fn file_name(resource: &RateLimitConfig, index: usize) -> PathBuf {
    let name = [&resource.name, &resource.domain]
        .into_iter()
        .find(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| format!("#{index}"));
    PathBuf::from(format!("xds:{name}"))
}

/// The descriptor file `resource` stands for, as JSON text.
pub(super) fn descriptor_file(resource: &RateLimitConfig) -> String {
    let file = json!({
        "domain": resource.domain,
        "descriptors": resource.descriptors.iter().map(descriptor).collect::<Vec<_>>(),
    });
    file.to_string()
}

/// One descriptor: fields at their zero value are left out, as a file would leave them.
fn descriptor(d: &RateLimitDescriptor) -> Json {
    let mut out = Map::new();
    out.insert("key".into(), d.key.clone().into());
    if !d.value.is_empty() {
        out.insert("value".into(), d.value.clone().into());
    }
    if let Some(policy) = &d.rate_limit {
        out.insert("rate_limit".into(), rate_limit(policy));
    }
    if !d.descriptors.is_empty() {
        let children = d.descriptors.iter().map(descriptor).collect();
        out.insert("descriptors".into(), Json::Array(children));
    }
    for (name, set) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if set {
            out.insert(name.into(), true.into());
        }
    }
    if let Some(metadata) = &d.metadata {
        out.insert("metadata".into(), structure(metadata));
    }
    Json::Object(out)
}

/// A `rate_limit` block. `UNKNOWN` (0) is an unset unit: the validator then says the
/// unit is missing, unless the rule is unlimited.
fn rate_limit(policy: &RateLimitPolicy) -> Json {
    let mut out = Map::new();
    match RateLimitUnit::try_from(policy.unit) {
        Ok(RateLimitUnit::Unknown) => {}
        Ok(unit) => {
            out.insert("unit".into(), unit.as_str_name().into());
        }
        // Not a unit of the proto: passed on as a number, which the validator refuses
        // as a unit it does not know.
        Err(_) => {
            out.insert("unit".into(), format!("enum value {}", policy.unit).into());
        }
    }
    if !policy.unlimited {
        out.insert("requests_per_unit".into(), policy.requests_per_unit.into());
    }
    if policy.unlimited {
        out.insert("unlimited".into(), true.into());
    }
    if !policy.name.is_empty() {
        out.insert("name".into(), policy.name.clone().into());
    }
    if !policy.replaces.is_empty() {
        let names = policy
            .replaces
            .iter()
            .map(|r| json!({ "name": r.name }))
            .collect();
        out.insert("replaces".into(), Json::Array(names));
    }
    Json::Object(out)
}

/// A protobuf `Struct` as the JSON it stands for.
fn structure(s: &Struct) -> Json {
    Json::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect(),
    )
}

/// A protobuf `Value` as JSON.
fn value(v: &Value) -> Json {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
        }
        Some(Kind::StringValue(s)) => s.clone().into(),
        Some(Kind::BoolValue(b)) => (*b).into(),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(value).collect()),
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    use super::*;
    use crate::config::render_errors;

    fn any(resource: &RateLimitConfig) -> Any {
        Any {
            type_url: TYPE_URL.into(),
            value: resource.encode_to_vec(),
        }
    }

    fn limited(key: &str, unit: RateLimitUnit, requests: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: requests,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn resource(
        name: &str,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitConfig {
        RateLimitConfig {
            name: name.into(),
            domain: domain.into(),
            descriptors,
        }
    }

    #[test]
    fn every_unit_and_field_loads() {
        let mut nested = limited("user", RateLimitUnit::Week, 7);
        nested.value = "a \"quoted\" \\ value: with # yaml".into();
        nested.shadow_mode = true;
        nested.quota_mode = true;
        nested.detailed_metric = true;
        let mut named = limited("named", RateLimitUnit::Second, 2);
        let policy = named.rate_limit.as_mut().unwrap();
        policy.name = "two".into();
        policy.replaces = vec![RateLimitReplace {
            name: "other".into(),
        }];
        let parent = RateLimitDescriptor {
            key: "tenant".into(),
            value: "true".into(),
            descriptors: vec![nested],
            ..Default::default()
        };
        let free = RateLimitDescriptor {
            key: "free".into(),
            rate_limit: Some(RateLimitPolicy {
                unlimited: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut descriptors = vec![parent, named, free];
        for (key, unit) in [
            ("m", RateLimitUnit::Minute),
            ("h", RateLimitUnit::Hour),
            ("d", RateLimitUnit::Day),
            ("mo", RateLimitUnit::Month),
            ("y", RateLimitUnit::Year),
        ] {
            descriptors.push(limited(key, unit, 1));
        }
        let config = config(
            &[
                any(&resource("one", "shop", descriptors)),
                any(&resource("two", "other", vec![])),
            ],
            SharedDomains::Refused,
        )
        .unwrap();
        assert_eq!(config.domains(), ["other", "shop"]);
        let keys: Vec<&str> = config.rules().iter().map(|r| r.full_key.as_str()).collect();
        assert!(
            keys.contains(&"shop.tenant_true.user_a \"quoted\" \\ value: with # yaml"),
            "{keys:?}"
        );
        assert_eq!(keys.len(), 8, "{keys:?}");
    }

    #[test]
    fn errors_name_the_resource_and_descriptor_without_lines() {
        let no_unit = limited("user", RateLimitUnit::Unknown, 3);
        let errors = config(
            &[any(&resource("limits", "shop", vec![no_unit]))],
            SharedDomains::Refused,
        )
        .unwrap_err();
        let text = render_errors(&errors);
        assert!(
            text.starts_with("xds:limits: descriptor 'shop.user': "),
            "{text}"
        );
        assert!(errors.iter().all(|e| e.line.is_none()));

        let mut both = limited("user", RateLimitUnit::Minute, 3);
        both.rate_limit.as_mut().unwrap().unlimited = true;
        let text = render_errors(
            &config(
                &[any(&resource("r", "shop", vec![both]))],
                SharedDomains::Refused,
            )
            .unwrap_err(),
        );
        assert!(
            text.contains(
                "xds:r: descriptor 'shop.user': should not specify rate limit unit when unlimited"
            ),
            "{text}"
        );
    }

    #[test]
    fn foreign_and_broken_resources_are_refused() {
        let foreign = Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: Vec::new(),
        };
        let broken = Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff],
        };
        let errors = config(&[foreign, broken], SharedDomains::Refused).unwrap_err();
        assert_eq!(errors.len(), 2);
        assert!(
            errors
                .iter()
                .all(|e| e.kind == ConfigErrorKind::BadResource)
        );
        let text = render_errors(&errors);
        assert!(
            text.contains(
                "xds:#0: resource of type \"type.googleapis.com/envoy.config.cluster.v3.Cluster\""
            ),
            "{text}"
        );
        assert!(
            text.contains("xds:#1: resource cannot be decoded"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_snapshot_is_an_empty_config() {
        assert!(
            config(&[], SharedDomains::Refused)
                .unwrap()
                .domains()
                .is_empty()
        );
    }
}
