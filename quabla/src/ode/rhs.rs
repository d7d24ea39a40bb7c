//! Calling the user's right-hand side. The solvers keep the state flat (`[n]`), so that it packs
//! into one loop carry; `f` sees it in `y0`'s shape, and its result is checked against `y0`'s
//! shape and dtype (a weakly typed result adopts the state's dtype) and flattened back.

use crate::{DType, Error, Result, Tensor};

/// The user's `f(y, t, args)` as the solvers call it.
type UserFn<'a> = dyn Fn(&Tensor, &Tensor, &[Tensor]) -> Result<Tensor> + 'a;

pub(super) struct Rhs<'a> {
    f: &'a UserFn<'a>,
    shape: Vec<usize>,
    dims: Vec<isize>,
    pub(super) dtype: DType,
    /// The number of state elements.
    pub(super) n: usize,
}

fn describe(dtype: DType, shape: &[usize]) -> String {
    format!("{}{:?}", dtype.name(), shape)
}

impl<'a> Rhs<'a> {
    pub(super) fn new(f: &'a UserFn<'a>, shape: &[usize], dtype: DType) -> Rhs<'a> {
        Rhs {
            f,
            shape: shape.to_vec(),
            dims: shape.iter().map(|&d| d as isize).collect(),
            dtype,
            n: shape.iter().product(),
        }
    }

    /// A state in `y0`'s shape as a flat `[n]` vector.
    pub(super) fn flat(&self, y: &Tensor) -> Result<Tensor> {
        if y.shape() == [self.n] {
            Ok(y.clone())
        } else {
            y.reshape([self.n as isize])
        }
    }

    /// A flat state (or `[m, n]` stack of states) in `y0`'s shape (or `[m, *y0.shape]`).
    pub(super) fn unflat(&self, y: &Tensor, leading: Option<usize>) -> Result<Tensor> {
        let mut dims = Vec::with_capacity(self.dims.len() + 1);
        if let Some(m) = leading {
            dims.push(m as isize);
        }
        dims.extend(&self.dims);
        let target: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        if y.shape() == target.as_slice() {
            Ok(y.clone())
        } else {
            y.reshape(dims)
        }
    }

    /// `f(y, t, args)` on a flat state, flat.
    pub(super) fn eval(&self, y: &Tensor, t: &Tensor, args: &[Tensor]) -> Result<Tensor> {
        let out = (self.f)(&self.unflat(y, None)?, t, args)?;
        let out = self.conform(out)?;
        self.flat(&out)
    }

    /// The contract of `f`: `dy/dt` has the state's shape and dtype.
    fn conform(&self, out: Tensor) -> Result<Tensor> {
        let shape_ok = out.shape() == self.shape.as_slice();
        if shape_ok && out.dtype() == self.dtype {
            return Ok(out);
        }
        if shape_ok && out.is_weak() && out.dtype().is_float() {
            return out.astype(self.dtype);
        }
        let message = format!(
            "odeint: f returned {} but y0 is {}; f(y, t, args) must return dy/dt with the shape and dtype of y0",
            describe(out.dtype(), out.shape()),
            describe(self.dtype, &self.shape)
        );
        if shape_ok {
            Err(Error::Type { message })
        } else {
            Err(Error::Shape {
                op: "odeint".into(),
                message,
            })
        }
    }
}
