//! A test PKI made with the `openssl` CLI: a CA and the server and client certificates it
//! signs, for the TLS tests of the gRPC and HTTP servers, the xDS client and PostgreSQL.

use std::path::PathBuf;

/// A CA and certificates it signed, in a temporary directory.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A new CA (`ca.pem`, `ca.key`) in a directory of its own.
    pub fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
        };
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=meshlimit test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        pki
    }

    /// The path of `name` in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs the openssl CLI in the directory; fails the test if it fails or is missing.
    pub fn openssl(&self, args: &[&str]) {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect(
                "the openssl CLI is needed (scripts/test.sh installs it; apt-get install openssl)",
            );
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `<name>.pem` and `<name>.key`: a certificate for `sans` (`DNS:…`/`IP:…`), for
    /// servers and clients, with serial `serial`.
    pub fn issue(&self, name: &str, sans: &str, serial: u32) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!(
                "subjectAltName={sans}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
                 extendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )
        .unwrap();
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &serial.to_string(),
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ]);
    }

    /// [`Pki::path`] as a command-line argument.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// meshlimit's flags for mTLS on its gRPC port: certificate `<server>.pem` and its
    /// key, clients verified against the CA.
    pub fn grpc_mtls(&self, server: &str) -> Vec<String> {
        vec![
            "--grpc-tls-cert".to_string(),
            self.arg(&format!("{server}.pem")),
            "--grpc-tls-key".to_string(),
            self.arg(&format!("{server}.key")),
            "--grpc-client-ca".to_string(),
            self.arg("ca.pem"),
        ]
    }
}
