//! Moving values in and out of a loop's frames: binding carries, collecting results and
//! siblings, and the flat forms of the scalar loops (float64 numbers) and the machine-code
//! loops (8-byte words, `native::words`).

use super::*;

impl RegionStep {
    /// The value of every sibling from the region's results: `values[i]` is region output
    /// `positions[i]`. A sibling takes the value of the last sibling of the same output and a
    /// copy otherwise; borrowed values are copied out of the enclosing frame.
    pub(super) fn collect(
        &self,
        mut values: Vec<Option<Storage<'_>>>,
        positions: &[usize],
        ws: &mut Workspace,
    ) -> Result<Vec<Storage<'static>>> {
        let mut out = Vec::with_capacity(self.outs.len());
        for (i, &(o, _)) in self.outs.iter().enumerate() {
            let k = positions
                .iter()
                .position(|&p| p == o)
                .ok_or_else(|| internal(format!("{}: output {o} not computed", self.form)))?;
            let last = self.outs[i + 1..].iter().all(|x| x.0 != o);
            let value = if last {
                Ok(values[k].take())
            } else {
                values[k]
                    .as_ref()
                    .map(|v| v.share(&mut ws.pool))
                    .transpose()
            }
            .and_then(|v| {
                v.ok_or_else(|| internal(format!("{}: output {o} not computed", self.form)))
            })
            .and_then(|v| v.into_owned(&mut ws.pool));
            match value {
                Ok(v) => out.push(v),
                Err(e) => {
                    for v in values.into_iter().flatten() {
                        ws.pool.recycle(v);
                    }
                    for v in out {
                        ws.pool.recycle(v);
                    }
                    return Err(e);
                }
            }
        }
        for v in values.into_iter().flatten() {
            ws.pool.recycle(v);
        }
        Ok(out)
    }
}

pub(super) fn missing_carry() -> quabla_backend::BackendError {
    internal("a carry is missing")
}

/// Moves the carries into the body's inputs `first ..`; a carry the body never reads goes
/// back to the pool.
pub(super) fn bind_carries<'a>(
    frame: &mut Frame<'_, 'a>,
    first: usize,
    carries: &mut [Option<Storage<'a>>],
    ws: &mut Workspace,
) -> Result<()> {
    for (j, carry) in carries.iter_mut().enumerate() {
        let value = carry.take().ok_or_else(missing_carry)?;
        if let Some(unused) = frame.bind(first + j, value) {
            ws.pool.recycle(unused);
        }
    }
    Ok(())
}

/// The moving form's end of an iteration: the body's first outputs become the carries (moved
/// where `take` allows, else copied), and the rest of the results and the old carries go back
/// to the pool.
pub(super) fn collect_carries<'a>(
    frame: &mut Frame<'_, 'a>,
    first: usize,
    take: &[bool],
    carries: &mut [Option<Storage<'a>>],
    ws: &mut Workspace,
) -> Result<()> {
    for (j, carry) in carries.iter_mut().enumerate() {
        let t = take.get(j).copied().unwrap_or(false);
        *carry = Some(frame.take_output(j, t, &mut ws.pool)?);
    }
    frame.clear_results(&mut ws.pool);
    for j in 0..carries.len() {
        if let Some(old) = frame.take_input(first + j) {
            ws.pool.recycle(old);
        }
    }
    Ok(())
}

/// Values with the dtypes and lengths of `like` from their elements one after the other in
/// `flat` (as [`native::words`] lays them out).
pub(super) fn unflatten(
    flat: &[u64],
    like: &[View<'_>],
    ws: &mut Workspace,
) -> Result<Vec<Storage<'static>>> {
    let mut values: Vec<Storage<'static>> = Vec::with_capacity(like.len());
    let mut at = 0;
    for v in like {
        let (dtype, len) = (v.dtype(), v.len());
        let elements = flat.get(at..at + len);
        let stored = match elements {
            Some(elements) => ws.pool.alloc(dtype, len).map(|mut b| {
                native::store_words(&mut b.view_mut(), 0, elements);
                Storage::Owned(b)
            }),
            None => {
                for v in values {
                    ws.pool.recycle(v);
                }
                return Err(internal("a native loop's carries are too short"));
            }
        };
        at += len;
        match stored {
            Ok(s) => values.push(s),
            Err(e) => {
                for v in values {
                    ws.pool.recycle(v);
                }
                return Err(out_of_memory(dtype, &[len], e));
            }
        }
    }
    Ok(values)
}

/// The one element of a value that a scalar body reads.
pub(super) fn first(v: &View<'_>) -> Result<f64> {
    if v.len() == 1 {
        Ok(v.get_f64(0))
    } else {
        Err(internal("a scalar loop value has several elements"))
    }
}

/// Output `j` of a scalar body as a one-element buffer of its dtype.
pub(super) fn scalar_storage(
    body: &ScalarBody,
    j: usize,
    v: f64,
    ws: &mut Workspace,
) -> Result<Storage<'static>> {
    let dtype = body.outputs.get(j).map_or(DType::F64, |o| o.1);
    let mut b = ws
        .pool
        .alloc(dtype, 1)
        .map_err(|e| out_of_memory(dtype, &[], e))?;
    b.view_mut().store_f64(0, &[v]);
    Ok(Storage::Owned(b))
}
