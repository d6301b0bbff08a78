//! A body gathered from the frames it came in, to be parsed whole: the request read ahead by
//! the proxy, a JSON reply teed on its way to the client.
//!
//! Nearly every such body comes in one frame, a slice of the buffer the connection read it
//! into: that one is kept as it is (a count on its buffer, no copy, no allocation). From a
//! second frame on, the frames are copied together into one buffer.

use bytes::{Bytes, BytesMut};

#[derive(Debug, Default)]
pub struct Gathered {
    first: Option<Bytes>,
    more: BytesMut,
}

impl Gathered {
    pub fn len(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len) + self.more.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory held for frames copied together (none while there is one frame).
    pub fn copied_capacity(&self) -> usize {
        self.more.capacity()
    }

    /// Adds a frame: the first is kept as it is; later ones are copied after what came before.
    pub fn push(&mut self, chunk: Bytes) {
        if self.first.is_none() && self.more.is_empty() {
            self.first = Some(chunk);
        } else {
            self.push_slice(&chunk);
        }
    }

    /// Adds a frame that is not shared (a copy is needed anyway).
    pub fn push_slice(&mut self, chunk: &[u8]) {
        if let Some(f) = self.first.take() {
            self.more.reserve(f.len() + chunk.len());
            self.more.extend_from_slice(&f);
        }
        self.more.extend_from_slice(chunk);
    }

    /// The whole body.
    pub fn into_bytes(self) -> Bytes {
        match self.first {
            Some(f) => f,
            None => self.more.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_frame_is_kept_without_a_copy_and_more_are_joined_in_order() {
        let buf = Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
        let mut one = Gathered::default();
        one.push(buf.slice(0..));
        assert_eq!(one.len(), buf.len());
        assert_eq!(one.copied_capacity(), 0);
        let whole = one.into_bytes();
        // The same memory: nothing was copied.
        assert_eq!(whole.as_ptr(), buf.as_ptr());

        let mut three = Gathered::default();
        three.push(buf.slice(0..5));
        three.push_slice(&buf[5..20]);
        three.push(buf.slice(20..));
        assert_eq!(three.len(), buf.len());
        assert!(three.copied_capacity() >= buf.len());
        assert_eq!(three.into_bytes(), buf);

        let mut empty_first = Gathered::default();
        empty_first.push(Bytes::new());
        assert!(empty_first.is_empty());
        empty_first.push(buf.clone());
        assert_eq!(empty_first.into_bytes(), buf);
        assert!(Gathered::default().into_bytes().is_empty());
    }
}
