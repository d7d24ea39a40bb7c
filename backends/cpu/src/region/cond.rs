//! `cond`: the selected branch's steps, run once.

use super::*;

impl RegionStep {
    pub(super) fn run_cond(
        &self,
        then_branch: &Body,
        else_branch: &Body,
        operands: &[View<'_>],
        ws: &mut Workspace,
        threads: usize,
    ) -> Result<Vec<Storage<'static>>> {
        let pred = match operands.first() {
            Some(View::Bool(p)) if p.len() == 1 => p[0],
            _ => return Err(internal("cond predicate is not a rank-0 bool")),
        };
        let branch = if pred { then_branch } else { else_branch };
        let mut frame = Frame::new(&branch.schedule);
        for (j, v) in operands[1..].iter().enumerate() {
            frame.bind(j, Storage::Borrowed(*v));
        }
        let ran = frame.run(Mode::Body, ws, threads);
        let mut results = Vec::with_capacity(self.outs.len());
        if ran.is_ok() {
            for (j, &take) in branch.take.iter().enumerate() {
                let owned = frame
                    .take_output(j, take, &mut ws.pool)
                    .and_then(|v| v.into_owned(&mut ws.pool));
                match owned {
                    Ok(v) => results.push(v),
                    Err(e) => {
                        frame.finish(&mut ws.pool);
                        for v in results {
                            ws.pool.recycle(v);
                        }
                        return Err(e);
                    }
                }
            }
        }
        frame.finish(&mut ws.pool);
        ran.map(|()| results)
    }
}
