//! gRPC server reflection (v1, and v1alpha for older clients): the port's services and
//! their messages, so that `grpcurl list` and `describe` work without proto files. The
//! descriptors of Envoy's services are compiled by `build.rs`; health's come with
//! tonic-health.

use tonic_reflection::server::v1::{ServerReflection, ServerReflectionServer};
use tonic_reflection::server::v1alpha::{
    ServerReflection as ServerReflectionAlpha,
    ServerReflectionServer as ServerReflectionAlphaServer,
};

/// `envoy.service.ratelimit.v3` and `envoy.service.rate_limit_quota.v3`, with every file
/// they import.
const SERVICES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/services.bin"));

/// The two reflection servers, listing the port's services.
///
/// # Panics
/// Never with the descriptors built in (a test builds them).
pub fn reflection_servers() -> (
    ServerReflectionServer<impl ServerReflection>,
    ServerReflectionAlphaServer<impl ServerReflectionAlpha>,
) {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(SERVICES)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let v1 = builder()
        .build_v1()
        .expect("the built-in descriptors are valid");
    let v1alpha = builder()
        .build_v1alpha()
        .expect("the built-in descriptors are valid");
    (v1, v1alpha)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_built_in_descriptors_are_valid() {
        let _ = super::reflection_servers();
    }
}
