//! The chunking the stream targets share: the input's first (up to) eight bytes choose where
//! the rest — the stream — is cut; each piece is `min + k % span` bytes long (the last one what
//! remains). Returns the stream whole and in its pieces.

pub fn cut(rest: &[u8], min: usize, span: usize) -> (&[u8], Vec<&[u8]>) {
    let (cuts, stream) = rest.split_at(rest.len().min(8));
    let mut pieces = Vec::new();
    let mut at = 0;
    for &k in cuts {
        let next = (at + min + k as usize % span).min(stream.len());
        pieces.push(&stream[at..next]);
        at = next;
    }
    pieces.push(&stream[at..]);
    (stream, pieces)
}
