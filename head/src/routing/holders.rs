//! The holders of one block hash in the block index.

/// One holder of a block: a node's dense number in the index and a slot.
pub(crate) type Holder = (u32, u32);

/// The holders of one block hash, kept sorted (a multiset: a chain that holds
/// a hash twice is listed twice). Most blocks have one holder, kept inline.
#[derive(Debug)]
pub(crate) enum Holders {
    One(Holder),
    Many(Vec<Holder>),
}

impl Holders {
    pub(crate) fn as_slice(&self) -> &[Holder] {
        match self {
            Holders::One(h) => std::slice::from_ref(h),
            Holders::Many(v) => v,
        }
    }

    pub(crate) fn insert(&mut self, holder: Holder) {
        match self {
            Holders::One(first) => {
                let first = *first;
                let mut v = vec![first, holder];
                v.sort_unstable();
                *self = Holders::Many(v);
            }
            Holders::Many(v) => {
                let at = v.partition_point(|h| *h <= holder);
                v.insert(at, holder);
            }
        }
    }

    /// Removes one occurrence of `holder`: `None` if it was not there, else
    /// whether no holders are left.
    pub(crate) fn remove(&mut self, holder: Holder) -> Option<bool> {
        match self {
            Holders::One(h) => (*h == holder).then_some(true),
            Holders::Many(v) => {
                let at = v.binary_search(&holder).ok()?;
                v.remove(at);
                match v.as_slice() {
                    [] => Some(true),
                    [only] => {
                        *self = Holders::One(*only);
                        Some(false)
                    }
                    _ => Some(false),
                }
            }
        }
    }
}
