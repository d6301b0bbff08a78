//! The fast path for reading one envelope: a single forward pass over the text that validates
//! the JSON grammar and picks out the members the inspector reads, as raw texts.
//!
//! It only ever *accepts*: on anything it does not read the common way — an escape in a member
//! name, a member given twice, nesting over [`MAX_DEPTH`], a number serde_json would have to
//! range-check, or anything invalid — it returns `None`, and serde_json reads the text instead
//! (the reference: its verdicts and error messages are what rpctap reports). So where this says
//! `Some`, serde_json would have read the same members; the differential tests in `rpc` check
//! that on generated and mutated envelopes.
//!
//! Why hand-written: parsing was the largest share of rpctap's own per-call cost, serde_json's
//! derive stays costly even with every member borrowed or skipped, and the other parsers tried
//! did no better for these reads (benches/RESULTS.md); a pass that does only what the inspector
//! needs is several times cheaper.

use super::{Member, RawEnvelope, Shape};

/// Deeper values are left to serde_json (which skips them without a limit).
const MAX_DEPTH: usize = 64;

/// Numbers longer than this, or with an exponent, where serde_json builds a number (a member
/// read as a whole, `isError`) are left to it: it may call them out of range. Likewise strings
/// with escapes there (lone surrogates are an error when serde_json decodes; see `built_scalar`).
const PLAIN_NUMBER_MAX: usize = 300;

/// Reads one envelope (a whole text holding one object), or `None` to leave it to serde_json.
pub(super) fn envelope(text: &str) -> Option<RawEnvelope<'_>> {
    let mut s = Scanner {
        text,
        b: text.as_bytes(),
        i: 0,
    };
    s.ws();
    s.eat(b'{')?;
    let mut e = RawEnvelope::default();
    s.ws();
    if s.peek()? == b'}' {
        s.i += 1;
    } else {
        loop {
            let key = s.key()?;
            match key {
                b"jsonrpc" => once(&mut e.jsonrpc, s.raw()?)?,
                b"id" => once(&mut e.id, s.raw()?)?,
                b"method" => once(&mut e.method, s.raw()?)?,
                b"params" => once(&mut e.params, s.member()?)?,
                b"result" => once(&mut e.result, s.member()?)?,
                b"error" => once(&mut e.error, s.member()?)?,
                _ => s.skip()?,
            }
            if s.next_in_object()? {
                break;
            }
        }
    }
    s.ws();
    (s.i == s.b.len()).then_some(e)
}

/// Sets a member read for the first time; a second one is serde_json's to report.
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(v);
    Some(())
}

/// The high bit of each byte of `x` (eight string bytes, the first lowest) that is `"`, `\` or
/// below 0x20 — exact for the lowest such byte (a borrow can only mark bytes above it).
#[inline(always)]
fn stops(x: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let quote = x ^ (ONES * u64::from(b'"'));
    let backslash = x ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (x.wrapping_sub(ONES * 0x20) & !x))
        & HIGH
}

/// Whether `b` can be written inside a JSON string as it is (no `"`, `\\` or control character:
/// serde_json's own rule for what it escapes), and, with `ascii`, holds only ASCII. Eight bytes
/// at a time with [`stops`], without an early exit (the strings this is for are short).
#[inline(always)]
pub(crate) fn plain_text(b: &[u8], ascii: bool) -> bool {
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let high = if ascii { HIGH } else { 0 };
    let word = |c: &[u8; 8]| {
        let x = u64::from_le_bytes(*c);
        stops(x) | (x & high)
    };
    let mut chunks = b.chunks_exact(8);
    let mut hits = (&mut chunks)
        .filter_map(<[u8]>::first_chunk::<8>)
        .fold(0, |h, c| h | word(c));
    let rest = chunks.remainder();
    if !rest.is_empty() {
        hits |= match b.last_chunk::<8>() {
            // The last eight bytes, overlapping the words before: no copy of the tail.
            Some(last) => word(last),
            // A short text, byte by byte (a copy into a word would be a call of its own).
            None => rest.iter().fold(0, |h, &c| {
                h | u64::from(c < 0x20 || c == b'"' || c == b'\\' || (ascii && c >= 0x80))
            }),
        };
    }
    hits == 0
}

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? != c {
            return None;
        }
        self.i += 1;
        Some(())
    }

    #[inline(always)]
    fn ws(&mut self) {
        // Compact JSON has no whitespace: one compare (any byte above a space is not
        // whitespace) leaves at once, before the four-way match.
        while let Some(&c) = self.b.get(self.i) {
            if c > b' ' || !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                return;
            }
            self.i += 1;
        }
    }

    /// After an object member's value: `,` (then the next member is due: `false`) or `}`
    /// (the object is done: `true`).
    #[inline(always)]
    fn next_in_object(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(false)
            }
            b'}' => {
                self.i += 1;
                Some(true)
            }
            _ => None,
        }
    }

    /// A member name and its `:`; names with escapes are left to serde_json (which decodes
    /// them before comparing).
    #[inline(always)]
    fn key(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let (start, end, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.ws();
        self.eat(b':')?;
        self.b.get(start..end)
    }

    /// A string starting at its opening quote: the content's byte range and whether it has
    /// escapes. Escapes are checked as serde_json's skipping checks them (`\u` takes any four
    /// hex digits); control characters are not allowed. The text is UTF-8 already.
    #[inline(always)]
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.plain_run();
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some((start, self.i - 1, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }

    /// Moves past string bytes that need no attention (not `"`, `\` or a control character);
    /// the byte that stops the run, and a short tail, are left for the caller's byte loop.
    /// Most strings here are short: their first 32 bytes go eight at a time, all compared at
    /// once (the classic "has a zero byte / a byte below n" bit tricks, exact for the lowest
    /// byte that matches). Past that, `memchr2` finds the next quote or backslash (SIMD) and
    /// the bytes before it are checked for control characters in one pass the compiler
    /// vectorizes.
    #[inline(always)]
    fn plain_run(&mut self) {
        for _ in 0..4 {
            let Some(chunk) = self.b.get(self.i..).and_then(<[u8]>::first_chunk::<8>) else {
                return;
            };
            let hits = stops(u64::from_le_bytes(*chunk));
            if hits != 0 {
                self.i += (hits.trailing_zeros() / 8) as usize;
                return;
            }
            self.i += 8;
        }
        let rest = self.b.get(self.i..).unwrap_or_default();
        let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
        let run = rest.get(..end).unwrap_or_default();
        if run.iter().fold(false, |any, &c| any | (c < 0x20)) {
            self.i += run.iter().position(|&c| c < 0x20).unwrap_or(0);
        } else {
            self.i += end;
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    /// A number by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    /// Returns whether it is plain (no exponent, short): one serde_json can always build.
    // Inlined: called from `skip` and `raw`, its call frame cost more than its body on short ids.
    #[inline(always)]
    fn number(&mut self) -> Option<bool> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => {
                self.i += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return None;
                }
            }
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        let mut plain = self.i - start <= PLAIN_NUMBER_MAX;
        if let Some(b'e' | b'E') = self.peek() {
            plain = false;
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(plain)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if !self.b.get(self.i..)?.starts_with(word) {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// One value, skipped (validated, not built).
    #[inline(always)]
    fn skip(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'{' | b'[' => self.skip_nested(),
            _ => self.scalar(),
        }
    }

    /// A string, literal or number at the current byte, skipped.
    #[inline(always)]
    fn scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }

    /// A scalar where serde_json builds the value instead of skipping it (`params`, `result`
    /// or `error` themselves, `isError`): numbers it would range-check and strings it would
    /// decode (see `PLAIN_NUMBER_MAX`) are left to it.
    fn built_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number()?.then_some(()),
            b'"' => matches!(self.string()?, (_, _, false)).then_some(()),
            _ => self.scalar(),
        }
    }

    /// An object or array, skipped. Iterative: containers push their closing bracket on a
    /// fixed stack.
    fn skip_nested(&mut self) -> Option<()> {
        let mut closers = [0u8; MAX_DEPTH];
        let mut depth = 0;
        loop {
            // A value.
            self.ws();
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    self.i += 1;
                    self.ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.i += 1;
                    } else {
                        if depth == MAX_DEPTH {
                            return None;
                        }
                        closers[depth] = close;
                        depth += 1;
                        if close == b'}' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                _ => self.scalar()?,
            }
            // After a value: close what is done, or move to the next element.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.ws();
                let c = self.peek()?;
                if c == b',' {
                    self.i += 1;
                    if closers[depth - 1] == b'}' {
                        self.key()?;
                    }
                    break;
                }
                if c != closers[depth - 1] {
                    return None;
                }
                self.i += 1;
                depth -= 1;
            }
        }
    }

    /// One value, skipped, as its raw text (what serde_json's `RawValue` would hold).
    /// Inlined into the envelope's few callers (id, params, result): the call was measurable.
    #[inline(always)]
    fn raw(&mut self) -> Option<&'a str> {
        self.ws();
        let start = self.i;
        self.skip()?;
        // Both ends are at ASCII bytes of the (UTF-8) text, so this never fails.
        self.text.get(start..self.i)
    }

    /// `params`, `result` or `error`: its shape, and the few members of an object the
    /// inspector reads (the last of a repeated one wins, as in serde_json's reading; a repeated
    /// `name` or `uri`, which decide a call's target, is left to serde_json to flag).
    fn member(&mut self) -> Option<Member<'a>> {
        self.ws();
        match self.peek()? {
            b'{' => {
                self.i += 1;
                let mut m = Member {
                    shape: Shape::Object,
                    ..Member::default()
                };
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(m);
                }
                loop {
                    match self.key()? {
                        // Given twice, they are serde_json's to read (and flag).
                        b"name" => once(&mut m.name, self.raw()?)?,
                        b"uri" => once(&mut m.uri, self.raw()?)?,
                        b"taskId" => m.task_id = Some(self.raw()?),
                        b"task" => m.task_object = self.raw()?.starts_with('{'),
                        b"resultType" => m.result_type_task = self.raw()? == "\"task\"",
                        b"code" => m.code = Some(self.raw()?),
                        b"message" => m.message = Some(self.raw()?),
                        b"isError" => m.is_error = self.is_true()?,
                        _ => self.skip()?,
                    }
                    if self.next_in_object()? {
                        return Some(m);
                    }
                }
            }
            b'[' => {
                self.skip()?;
                Some(Member {
                    shape: Shape::Array,
                    ..Member::default()
                })
            }
            _ => {
                self.built_scalar()?;
                Some(Member::default())
            }
        }
    }

    /// Whether a value is `true`; anything else is skipped (a scalar as in
    /// [`Self::built_scalar`]).
    fn is_true(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b't' => {
                self.literal(b"true")?;
                Some(true)
            }
            b'{' | b'[' => {
                self.skip_nested()?;
                Some(false)
            }
            _ => {
                self.built_scalar()?;
                Some(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// `plain_text` against the rule byte by byte: every byte value, at every place in texts
    /// of every length up to three words.
    #[test]
    fn plain_text_is_the_rule_for_every_byte_at_every_place() {
        let plain = |b: &[u8], ascii: bool| {
            b.iter()
                .all(|&c| c >= 0x20 && c != b'"' && c != b'\\' && (!ascii || c < 0x80))
        };
        for len in 0..=24 {
            for at in 0..len.max(1) {
                for c in 0..=255u8 {
                    let mut b = vec![b'x'; len];
                    if let Some(x) = b.get_mut(at) {
                        *x = c;
                    }
                    for ascii in [false, true] {
                        assert_eq!(
                            super::plain_text(&b, ascii),
                            plain(&b, ascii),
                            "{b:?} ascii={ascii}"
                        );
                    }
                }
            }
        }
    }
}
