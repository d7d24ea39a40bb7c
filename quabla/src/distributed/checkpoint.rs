//! Checkpoints of a process group: [`save`] writes one file from rank 0 once every rank has
//! shown it holds the same tree, and [`load`] reads it back in any number of processes.
//!
//! A save is two agreements around one write. First every rank sends a digest of its tree and
//! the path; if they differ (replicas that diverged, ranks saving different things) every
//! rank gets an error naming each rank's digest and nothing is written. Then rank 0 writes
//! atomically (`qb::save` writes a temporary file and renames it, so a crash never leaves a
//! partial file and the previous checkpoint survives any failure), and tells the others
//! whether it succeeded, so every rank returns the same outcome.
//!
//! The file is an ordinary `qb::save` file with nothing of the group in it, which is why any
//! number of processes can load it.

use super::group::Group;
use crate::error::Result;
use crate::tree::{Leaf, Tree, Value};
use quabla_ir::HostData;
use std::path::Path;

/// FNV-1a over 64-bit words.
struct Digest(u64);

impl Digest {
    fn new() -> Digest {
        Digest(0xcbf2_9ce4_8422_2325)
    }

    fn word(&mut self, w: u64) {
        self.0 ^= w;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    fn text(&mut self, s: &str) {
        self.word(s.len() as u64);
        for chunk in s.as_bytes().chunks(8) {
            let mut bytes = [0u8; 8];
            bytes[..chunk.len()].copy_from_slice(chunk);
            self.word(u64::from_le_bytes(bytes));
        }
    }
}

/// A digest of `tree`'s structure and leaves, bit for bit (a `-0.0` and a NaN payload count):
/// equal on two ranks exactly when their trees are, but for collisions of a 64-bit hash.
pub(crate) fn tree_digest<T: Tree>(tree: &T) -> Result<u64> {
    let (leaves, def) = crate::tree::flatten(tree);
    def.check()?;
    let mut d = Digest::new();
    d.text(&def.to_string());
    for leaf in &leaves {
        match leaf {
            Leaf::Tensor(t) => {
                let host = t.host_for("distributed digest")?;
                d.text(host.dtype().name());
                for &n in host.shape.dims() {
                    d.word(n as u64);
                }
                match &host.data {
                    HostData::F64(v) => v.iter().for_each(|x| d.word(x.to_bits())),
                    HostData::F32(v) => v.iter().for_each(|x| d.word(x.to_bits() as u64)),
                    HostData::Bool(v) => v.iter().for_each(|&x| d.word(x as u64)),
                    HostData::I32(v) => v.iter().for_each(|&x| d.word(x as u32 as u64)),
                    HostData::I64(v) => v.iter().for_each(|&x| d.word(x as u64)),
                }
            }
            other => d.text(&format!("{other:?}")),
        }
    }
    Ok(d.0)
}

/// Saves `tree` to `path` as one checkpoint of the current group: every rank calls it with
/// the same path and an identical tree (checked by digest; otherwise an
/// `Error::Distributed` naming each rank's digest, and nothing is written); rank 0 writes the
/// file atomically; every rank returns once it is written, or returns rank 0's error.
pub fn save<T: Tree>(path: impl AsRef<Path>, tree: &T) -> Result<()> {
    save_in(&super::current()?, path.as_ref(), tree)
}

pub(crate) fn save_in<T: Tree>(group: &Group, path: &Path, tree: &T) -> Result<()> {
    let digest = tree_digest(tree);
    let description = match &digest {
        Ok(d) => format!("save({}) of a tree with digest {d:016x}", path.display()),
        Err(_) => format!("save({})", path.display()),
    };
    group.agree("save", &description, digest.map(|_| ()))?;
    let written = if group.rank() == 0 {
        crate::io::save(path, tree)
    } else {
        Ok(())
    };
    group.agree(
        "save",
        &format!("save({}) written", path.display()),
        written,
    )
}

/// Loads a checkpoint written by [`save`] (or any `qb::save` file) on every rank of the
/// current group, checking that every rank read the same tree. The path must be readable by
/// every rank (a filesystem they share).
pub fn load(path: impl AsRef<Path>) -> Result<Value> {
    let group = super::current()?;
    let path = path.as_ref();
    let value = crate::io::load(path);
    let digest = value.as_ref().map_err(Clone::clone).and_then(tree_digest);
    let description = match &digest {
        Ok(d) => format!("load({}) of a tree with digest {d:016x}", path.display()),
        Err(_) => format!("load({})", path.display()),
    };
    group.agree("load", &description, digest.map(|_| ()))?;
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_see_every_bit_and_the_structure() {
        let a = crate::creation::array([1.0, 2.0]).unwrap();
        let b = crate::creation::array([1.0, 2.0000000000000004]).unwrap();
        let z = crate::creation::array([0.0, 2.0]).unwrap();
        let nz = crate::creation::array([-0.0, 2.0]).unwrap();
        assert_eq!(tree_digest(&a).unwrap(), tree_digest(&a.clone()).unwrap());
        assert_ne!(tree_digest(&a).unwrap(), tree_digest(&b).unwrap());
        assert_ne!(tree_digest(&z).unwrap(), tree_digest(&nz).unwrap());
        assert_ne!(
            tree_digest(&(a.clone(),)).unwrap(),
            tree_digest(&vec![a.clone()]).unwrap()
        );
    }
}
