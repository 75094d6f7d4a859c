//! The node layouts (GET /resources/{id}) of the jobs the watcher saw start most recently, so a
//! DRA pod's bind plans its claims from the layout the allocation read already fetched instead of
//! reading it again. Bounded: a bind comes within a second or two of its allocation, and a layout
//! evicted by then is read again (the same answer, one request more). A job whose nodes changed
//! since (a resize) no longer matches its layout, which is then read again too
//! ([`super::JobWatcher::recent_layout`]).

use slurm_rest::models::NodeResourceLayout;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Layouts kept at most: about 1,000 starts, a few hundred KiB.
pub(super) const CAPACITY: usize = 1024;

/// The last [`CAPACITY`] layouts read, by job id; the oldest is dropped first.
#[derive(Default)]
pub(super) struct RecentLayouts {
    by_job: HashMap<u32, Arc<[NodeResourceLayout]>>,
    order: VecDeque<u32>,
}

impl RecentLayouts {
    /// Keeps `layout` as `job_id`'s (a job read again replaces its entry).
    pub(super) fn insert(&mut self, job_id: u32, layout: Arc<[NodeResourceLayout]>) {
        if self.by_job.insert(job_id, layout).is_none() {
            self.order.push_back(job_id);
        }
        while self.order.len() > CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.by_job.remove(&old);
            }
        }
    }

    pub(super) fn get(&self, job_id: u32) -> Option<Arc<[NodeResourceLayout]>> {
        self.by_job.get(&job_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(node: &str) -> Arc<[NodeResourceLayout]> {
        vec![NodeResourceLayout {
            node: node.into(),
            ..Default::default()
        }]
        .into()
    }

    #[test]
    fn keeps_the_latest_layouts_and_drops_the_oldest() {
        let mut r = RecentLayouts::default();
        for id in 0..CAPACITY as u32 + 2 {
            r.insert(id, layout(&format!("n{id}")));
        }
        assert!(r.get(0).is_none());
        assert!(r.get(1).is_none());
        assert_eq!(r.get(2).unwrap()[0].node, "n2");
        let last = CAPACITY as u32 + 1;
        assert_eq!(r.get(last).unwrap()[0].node, format!("n{last}"));
        assert_eq!(r.order.len(), CAPACITY);
        assert_eq!(r.by_job.len(), CAPACITY);

        // Read again: replaced in place, not counted twice.
        r.insert(2, layout("again"));
        assert_eq!(r.get(2).unwrap()[0].node, "again");
        assert_eq!(r.order.len(), CAPACITY);
    }
}
