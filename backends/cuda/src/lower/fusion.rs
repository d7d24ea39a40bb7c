//! Elementwise fusion: which elementwise nodes share a kernel.
//!
//! Nodes are grouped greedily in topological order. A node joins the open group of one of its
//! operands when it has that group's shape; failing that, the latest open group of its shape
//! (so `sin(x)` and `cos(x)` of one input share a kernel); otherwise it starts a group. A
//! group is sealed, and its kernel emitted, as soon as a node outside it needs one of its
//! members (or at the end of the graph): nothing joins it afterwards, which keeps the groups
//! acyclic — an open group has no consumers outside it, so no other group depends on it, and
//! a later member cannot depend on a group that depends on the group it joins. The kernel
//! writes only the members needed outside the group.

use super::{internal, Ctx, Val};
use crate::codegen::elementwise::{group_kernel, External, Group, Member, Source};
use crate::program::Arg;
use quabla_backend::BackendError;
use quabla_ir::NodeId;
use std::collections::HashMap;

/// The open and sealed groups of one graph.
#[derive(Debug, Default)]
pub struct Fusion {
    groups: Vec<GroupState>,
    group_of: HashMap<usize, usize>,
}

#[derive(Debug)]
struct GroupState {
    dims: Vec<usize>,
    members: Vec<usize>,
    open: bool,
}

impl Ctx<'_> {
    /// The node an operand reads for elementwise use: a broadcast to the consumer's own shape
    /// is its operand.
    fn elementwise_source(&self, operand: NodeId) -> NodeId {
        match self.vals[operand.index()] {
            Some(Val::Bcast(of)) if self.dims(of) == self.dims(operand) => of,
            _ => operand,
        }
    }

    /// Adds elementwise node `i` to a group (see the module docs).
    pub(super) fn fuse(&mut self, i: usize) -> Result<(), BackendError> {
        let dims = self.g.nodes()[i].ty.shape.dims().to_vec();
        let operands: Vec<NodeId> = self.g.nodes()[i]
            .operands
            .iter()
            .map(|&o| self.elementwise_source(o))
            .collect();
        let open_group = |ctx: &Self, node: usize| -> Option<usize> {
            let g = *ctx.fusion.group_of.get(&node)?;
            ctx.fusion.groups[g].open.then_some(g)
        };
        let chosen = operands
            .iter()
            .filter_map(|o| open_group(self, o.index()))
            .find(|&g| self.fusion.groups[g].dims == dims)
            .or_else(|| {
                self.fusion
                    .groups
                    .iter()
                    .rposition(|g| g.open && g.dims == dims)
            });
        // Every other open group this node reads from is sealed: the node is outside it.
        let mut others: Vec<usize> = operands
            .iter()
            .filter_map(|o| open_group(self, o.index()))
            .filter(|&g| Some(g) != chosen)
            .collect();
        // A virtual broadcast of a pending member reads that member from outside its group.
        for &o in &self.g.nodes()[i].operands {
            if let Some(Val::Bcast(of)) = self.vals[o.index()] {
                if let Some(g) = open_group(self, of.index()) {
                    if Some(g) != chosen || self.dims(of) != dims {
                        others.push(g);
                    }
                }
            }
        }
        others.sort_unstable();
        others.dedup();
        for g in others {
            self.seal(g)?;
        }
        let g = match chosen {
            Some(g) if self.fusion.groups[g].open => g,
            _ => {
                self.fusion.groups.push(GroupState {
                    dims,
                    members: Vec::new(),
                    open: true,
                });
                self.fusion.groups.len() - 1
            }
        };
        self.fusion.groups[g].members.push(i);
        self.fusion.group_of.insert(i, g);
        Ok(())
    }

    /// Seals the group of pending node `i`.
    pub(super) fn seal_group_of(&mut self, i: usize) -> Result<(), BackendError> {
        let g = *self
            .fusion
            .group_of
            .get(&i)
            .ok_or_else(|| internal(format!("node %{i} is pending outside any group")))?;
        self.seal(g)
    }

    /// Seals every open group.
    pub(super) fn seal_all(&mut self) -> Result<(), BackendError> {
        for g in 0..self.fusion.groups.len() {
            if self.fusion.groups[g].open {
                self.seal(g)?;
            }
        }
        Ok(())
    }

    /// Seals group `g`: emits its kernel, writing the members needed outside it.
    fn seal(&mut self, g: usize) -> Result<(), BackendError> {
        if !self.fusion.groups[g].open {
            return Ok(());
        }
        self.fusion.groups[g].open = false;
        let members = self.fusion.groups[g].members.clone();
        let dims = self.fusion.groups[g].dims.clone();
        let position: HashMap<usize, usize> =
            members.iter().enumerate().map(|(k, &m)| (m, k)).collect();
        let mut externals: Vec<External> = Vec::new();
        let mut external_bufs: Vec<usize> = Vec::new();
        let mut external_index: HashMap<(usize, Vec<usize>), usize> = HashMap::new();
        let mut group_members = Vec::with_capacity(members.len());
        for &m in &members {
            let node = &self.g.nodes()[m];
            let op = node.op.clone();
            let operands = node.operands.clone();
            let mut sources = Vec::with_capacity(operands.len());
            for o in operands {
                let o = self.elementwise_source(o);
                if let Some(&k) = position.get(&o.index()) {
                    sources.push(Source::Member(k));
                    continue;
                }
                // Where the operand's value is: a literal, or a buffer read with the shape it
                // has (broadcast to the group's).
                let (read, read_dims) = match self.vals[o.index()].clone() {
                    Some(Val::Bcast(of)) => (of, self.dims(of)),
                    _ => (o, self.dims(o)),
                };
                if let Some(Val::Scalar(v)) = self.vals[read.index()] {
                    sources.push(Source::Literal(v));
                    continue;
                }
                let buf = self.buf_of(read)?;
                let key = (buf, read_dims.clone());
                let k = match external_index.get(&key) {
                    Some(&k) => k,
                    None => {
                        externals.push(External {
                            elem: self.b.elem(buf),
                            dims: read_dims,
                        });
                        external_bufs.push(buf);
                        external_index.insert(key, externals.len() - 1);
                        externals.len() - 1
                    }
                };
                sources.push(Source::External(k));
            }
            group_members.push(Member {
                op,
                operands: sources,
                dtype: self.g.nodes()[m].ty.dtype,
            });
        }
        // The members read outside the group: by another node, or as a graph output.
        let mut outputs = Vec::new();
        let mut out_bufs = Vec::new();
        for (k, &m) in members.iter().enumerate() {
            let outside =
                self.is_output[m] || self.users[m].iter().any(|u| !position.contains_key(u));
            if outside {
                let elem = self.out_elem(m);
                let len = self.g.nodes()[m].ty.shape.size();
                let buf = self.temp(elem, len);
                outputs.push((k, elem));
                out_bufs.push(buf);
                self.vals[m] = Some(Val::Buf(buf));
            }
        }
        if outputs.is_empty() {
            return Ok(());
        }
        let items = dims.iter().product();
        let group = Group {
            dims,
            externals,
            members: group_members,
            outputs,
        };
        let kernel = group_kernel(&group, self.t());
        let args = external_bufs
            .into_iter()
            .chain(out_bufs)
            .map(Arg::Buf)
            .collect();
        self.launch(kernel, items, args);
        Ok(())
    }
}
