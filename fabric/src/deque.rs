//! A FIFO queue whose first element is held inline.
//!
//! Queues that usually hold zero or one element and are touched once per message (a collective
//! channel's early arrivals; the flow transport's queue pairs used it too until they laid their
//! first message out on their own lines) pay a
//! cache miss for a `VecDeque`'s separate buffer on every use when thousands of them are
//! interleaved. Holding the head inline makes the common case one cache line; the buffer is
//! used only from the second element on.

use std::collections::VecDeque;

/// A FIFO queue with its first element inline (see the module docs).
#[derive(Debug, Clone)]
pub struct HeadDeque<T> {
    head: Option<T>,
    rest: VecDeque<T>,
}

impl<T> Default for HeadDeque<T> {
    fn default() -> Self {
        HeadDeque {
            head: None,
            rest: VecDeque::new(),
        }
    }
}

impl<T> HeadDeque<T> {
    /// The first element, if any.
    pub fn front(&self) -> Option<&T> {
        self.head.as_ref()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Appends `x` at the back.
    pub fn push_back(&mut self, x: T) {
        if self.head.is_none() {
            self.head = Some(x);
        } else {
            self.rest.push_back(x);
        }
    }

    /// Takes the first element out.
    pub fn pop_front(&mut self) -> Option<T> {
        let x = self.head.take();
        self.head = self.rest.pop_front();
        x
    }
}

#[cfg(test)]
mod tests {
    use super::HeadDeque;

    #[test]
    fn is_a_fifo() {
        let mut q = HeadDeque::default();
        assert!(q.is_empty());
        for i in 0..5 {
            q.push_back(i);
        }
        assert_eq!((q.len(), q.front()), (5, Some(&0)));
        assert_eq!(q.pop_front(), Some(0));
        q.push_back(5);
        let rest: Vec<i32> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(rest, [1, 2, 3, 4, 5]);
        assert!(q.is_empty() && q.pop_front().is_none());
    }
}
