//! Secret and ConfigMap volumes laid out as the kubelet's atomic writer lays them out.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use super::Files;

/// Lays out `files` in `dir` as the kubelet's atomic writer does, replacing what was
/// there in one rename: a version directory holds the files, `..data` links to it, each key
/// is a link `key -> ..data/key`.
pub fn atomic_write(dir: &Path, files: &Files, mode: u32) {
    static VERSION: AtomicU32 = AtomicU32::new(0);
    // The kubelet names it after the time; any name unique in the directory will do.
    let version = format!("..version_{}", VERSION.fetch_add(1, Ordering::Relaxed));
    let new = dir.join(&version);
    std::fs::create_dir(&new).unwrap();
    set_mode(&new, 0o755);
    for (key, bytes) in files {
        let path = new.join(key);
        std::fs::write(&path, bytes).unwrap();
        set_mode(&path, mode);
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for key in files.keys() {
        let link = dir.join(key);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(key), &link).unwrap();
        }
    }
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !files.contains_key(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
}

pub(super) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub(super) fn to_files(files: &[(&str, &[u8])]) -> Files {
    files
        .iter()
        .map(|&(key, bytes)| (key.to_string(), bytes.to_vec()))
        .collect()
}
