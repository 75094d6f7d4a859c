//! A set that keeps a lone member inline. Most entries of the bridge's indexes have one member
//! (a job's pods, a pod's jobs, the pods with a job id label), and a `BTreeSet` allocates a node
//! with room for eleven, a `HashSet` a table with room for three: at 10,000 pods that was
//! megabytes of empty slots.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;

/// See the module doc. Iteration order is unspecified, as a `HashSet`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SmallSet<T: Eq + Hash> {
    #[default]
    Empty,
    One(T),
    Many(HashSet<T>),
}

impl<T: Eq + Hash> SmallSet<T> {
    /// Adds `v`; false when it was there already.
    pub fn insert(&mut self, v: T) -> bool {
        match std::mem::take(self) {
            SmallSet::Empty => {
                *self = SmallSet::One(v);
                true
            }
            SmallSet::One(x) if x == v => {
                *self = SmallSet::One(x);
                false
            }
            SmallSet::One(x) => {
                *self = SmallSet::Many(HashSet::from([x, v]));
                true
            }
            SmallSet::Many(mut s) => {
                let new = s.insert(v);
                *self = SmallSet::Many(s);
                new
            }
        }
    }

    /// Removes `v`; false when it was not there. A set left with one member holds it inline
    /// again.
    pub fn remove<Q>(&mut self, v: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match std::mem::take(self) {
            SmallSet::One(x) if x.borrow() == v => true,
            SmallSet::Many(mut s) => {
                let removed = s.remove(v);
                *self = if s.len() == 1 {
                    s.into_iter().next().map_or(SmallSet::Empty, SmallSet::One)
                } else {
                    SmallSet::Many(s)
                };
                removed
            }
            other => {
                *self = other;
                false
            }
        }
    }

    pub fn contains<Q>(&self, v: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self {
            SmallSet::Empty => false,
            SmallSet::One(x) => x.borrow() == v,
            SmallSet::Many(s) => s.contains(v),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            SmallSet::Empty => 0,
            SmallSet::One(_) => 1,
            SmallSet::Many(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let (one, many) = match self {
            SmallSet::Empty => (None, None),
            SmallSet::One(x) => (Some(x), None),
            SmallSet::Many(s) => (None, Some(s)),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_shrinks_and_holds_a_lone_member_inline() {
        let mut s = SmallSet::default();
        assert!(s.is_empty());
        assert!(s.insert("a".to_string()));
        assert!(!s.insert("a".to_string()), "already there");
        assert!(matches!(s, SmallSet::One(_)));
        assert!(s.insert("b".to_string()));
        assert!(s.insert("c".to_string()));
        assert_eq!(s.len(), 3);
        assert!(s.contains("b"));
        let mut all: Vec<&String> = s.iter().collect();
        all.sort();
        assert_eq!(all, ["a", "b", "c"]);
        assert!(s.remove("b"));
        assert!(!s.remove("b"), "already gone");
        assert!(s.remove("a"));
        assert_eq!(s, SmallSet::One("c".to_string()), "one left: inline again");
        assert!(!s.remove("x"));
        assert_eq!(s.len(), 1);
        assert!(s.remove("c"));
        assert!(s.is_empty() && s.iter().next().is_none());
    }
}
