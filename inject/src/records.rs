//! The pod records tandemd reads (`[kubernetes] pod_info_dir`): one
//! `<pod uid>.json` per pod with its namespace, name, labels, annotations
//! and container names, written atomically (temporary file, then rename),
//! mode 0644, removed when the pod goes.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::api::Pod;

/// The records of the pods this plugin saw, by pod UID.
#[derive(Debug)]
pub struct Records {
    dir: PathBuf,
    /// Container names by id, per pod UID.
    containers: BTreeMap<String, BTreeMap<String, String>>,
}

fn safe_uid(uid: &str) -> bool {
    !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

impl Records {
    /// Records kept in `dir` (created 0755 if missing).
    pub fn new(dir: &Path) -> std::io::Result<Records> {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        Ok(Records {
            dir: dir.to_path_buf(),
            containers: BTreeMap::new(),
        })
    }

    /// The file of pod `uid`.
    #[must_use]
    pub fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.json"))
    }

    /// Write (or rewrite) `pod`'s record, with container `id` named `name`
    /// if given.
    pub fn write(&mut self, pod: &Pod, container: Option<(&str, &str)>) -> std::io::Result<()> {
        if !safe_uid(&pod.uid) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("pod uid {:?} is not a UID", pod.uid),
            ));
        }
        let names = self.containers.entry(pod.uid.clone()).or_default();
        if let Some((id, name)) = container {
            names.insert(id.to_string(), name.to_string());
        }
        let body = serde_json::json!({
            "namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
            "labels": pod.labels, "annotations": pod.annotations, "containers": names,
        });
        let path = self.path(&pod.uid);
        let tmp = self.dir.join(format!(".{}.tmp", pod.uid));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(body.to_string().as_bytes())?;
        f.sync_all()?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, &path)
    }

    /// Remove pod `uid`'s record.
    pub fn remove(&mut self, uid: &str) {
        self.containers.remove(uid);
        if safe_uid(uid) {
            let _ = std::fs::remove_file(self.path(uid));
        }
    }

    /// Remove every record whose pod is not in `live` (after a restart).
    pub fn keep_only(&mut self, live: &[&str]) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(uid) = name.strip_suffix(".json") {
                if !live.contains(&uid) {
                    self.remove(uid);
                }
            }
        }
    }
}
