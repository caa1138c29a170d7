//! How one step's tokens are shared among the running slots, the same in
//! both engines: one token for every decoding slot, so prefill never stalls
//! them; then prompt chunks under the prefill budget, first come, first
//! served, so a later prompt never delays an earlier one's first token.

/// A running slot as the share-out sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Its place in the order of admission.
    pub admitted: u64,
    /// Tokens it still has to feed (1 while decoding).
    pub pending: usize,
}

/// What one step feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Slots decoding one token.
    pub decoding: usize,
    /// Prompt tokens fed.
    pub prompt_tokens: usize,
}

/// Reusable buffers for [`Sharer::share`], kept by each engine.
#[derive(Debug, Default)]
pub struct Sharer {
    work: Vec<Option<Work>>,
    order: Vec<usize>,
    fed: Vec<usize>,
}

impl Sharer {
    /// Shares one step among `slots` (`None` for an idle slot, in slot
    /// order) under a prefill `budget`; [`Sharer::fed`] then says how many
    /// tokens each slot feeds.
    pub fn share(
        &mut self,
        slots: impl IntoIterator<Item = Option<Work>>,
        budget: usize,
    ) -> Shared {
        self.work.clear();
        self.work.extend(slots);
        self.fed.clear();
        self.fed.resize(self.work.len(), 0);
        let mut decoding = 0;
        for (fed, work) in self.fed.iter_mut().zip(&self.work) {
            if work.is_some_and(|w| w.pending == 1) {
                *fed = 1;
                decoding += 1;
            }
        }
        self.order.clear();
        self.order
            .extend((0..self.work.len()).filter(|&i| self.work[i].is_some_and(|w| w.pending > 1)));
        let work = &self.work;
        self.order.sort_by_key(|&i| work[i].map(|w| w.admitted));
        let mut left = budget;
        for &i in &self.order {
            let pending = work[i].map_or(0, |w| w.pending);
            self.fed[i] = pending.min(left);
            left -= self.fed[i];
        }
        Shared {
            decoding,
            prompt_tokens: budget - left,
        }
    }

    /// Tokens each slot feeds in the step last shared, in slot order.
    pub fn fed(&self) -> &[usize] {
        &self.fed
    }
}

#[cfg(test)]
mod tests;
