//! Newline-delimited frames over a byte stream, read with a bound: a line longer than
//! the limit is reported by its length and never held, so a peer that sends an
//! endless line cannot grow the proxy's memory.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// One frame read from a peer, borrowed from the reader until the next is read.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A whole line, without its line ending.
    Line(&'a [u8]),
    /// A line longer than the limit: its bytes were read and dropped as they came.
    Oversized { len: u64 },
}

/// Reads frames one at a time from `inner`, holding at most `limit` bytes of a line,
/// in one buffer it keeps. Past [`LONG_LINE`] the buffer keeps room for the whole
/// limit while the reader lives: an allocator that returns a freed block late
/// (mimalloc, freed on another thread) would otherwise hold two for the next long line.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    limit: usize,
    line: Vec<u8>,
}

/// Past this length a line is given room for the whole limit at once rather than
/// doubled: copying a large block into a larger one keeps both resident for a moment.
/// The room is only address space until written.
const LONG_LINE: usize = 1 << 20;

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, limit: usize) -> FrameReader<R> {
        FrameReader {
            inner,
            limit,
            line: Vec::new(),
        }
    }

    /// The next non-blank frame, or `None` at the end of the stream. A last line
    /// without a line ending is still a frame.
    pub async fn next(&mut self) -> io::Result<Option<Frame<'_>>> {
        Ok(match self.line().await? {
            Gathered::End => None,
            Gathered::Whole => Some(self.frame()),
            Gathered::Oversized(len) => Some(Frame::Oversized { len }),
        })
    }

    /// The line just read, without a carriage return before its line ending.
    fn frame(&self) -> Frame<'_> {
        let mut line = &self.line[..];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        Frame::Line(line)
    }

    /// Reads the next non-blank line into `self.line`.
    async fn line(&mut self) -> io::Result<Gathered> {
        loop {
            self.line.clear();
            let mut len: u64 = 0;
            let mut oversized = false;
            let ended = loop {
                let buf = self.inner.fill_buf().await?;
                if buf.is_empty() {
                    break true;
                }
                let end = buf.iter().position(|b| *b == b'\n');
                let chunk = &buf[..end.unwrap_or(buf.len())];
                len += chunk.len() as u64;
                if !oversized {
                    if self.line.len() + chunk.len() > self.limit {
                        oversized = true;
                        self.line.clear();
                    } else {
                        grow(&mut self.line, chunk.len(), self.limit);
                        self.line.extend_from_slice(chunk);
                    }
                }
                let used = end.map_or(buf.len(), |i| i + 1);
                self.inner.consume(used);
                if end.is_some() {
                    break false;
                }
            };
            if oversized {
                return Ok(Gathered::Oversized(len));
            }
            if !self.line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Gathered::Whole);
            }
            if ended {
                return Ok(Gathered::End);
            }
        }
    }
}

/// What [`FrameReader::line`] found.
enum Gathered {
    End,
    Whole,
    Oversized(u64),
}

/// Makes room in `line` for `more` bytes (within `limit`): past [`LONG_LINE`], room
/// for the whole limit at once.
fn grow(line: &mut Vec<u8>, more: usize, limit: usize) {
    let want = line.len() + more;
    debug_assert!(want <= limit, "a line is never gathered past the limit");
    if want > line.capacity() && want > LONG_LINE {
        line.reserve_exact(limit - line.len());
    }
}

/// Writes one frame: the bytes, then a line ending. A frame never contains a line
/// ending of its own (serde_json escapes every one inside a string).
pub async fn write_frame(out: &mut (impl AsyncWrite + Unpin), frame: &[u8]) -> io::Result<()> {
    debug_assert!(!frame.contains(&b'\n'), "a frame is one line");
    out.write_all(frame).await?;
    out.write_all(b"\n").await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame read, owned: a line's bytes, or an oversized line's length.
    type Read = Result<Vec<u8>, u64>;

    fn line(bytes: &[u8]) -> Read {
        Ok(bytes.to_vec())
    }

    async fn frames(input: &[u8], limit: usize) -> Vec<Read> {
        // A small buffer, so that lines span several reads.
        let reader = tokio::io::BufReader::with_capacity(4, input);
        let mut frames = FrameReader::new(reader, limit);
        let mut out = Vec::new();
        while let Some(frame) = frames.next().await.expect("reading a slice cannot fail") {
            out.push(match frame {
                Frame::Line(bytes) => line(bytes),
                Frame::Oversized { len } => Err(len),
            });
        }
        out
    }

    #[tokio::test]
    async fn lines_are_split_on_newlines_and_blank_ones_skipped() {
        let got = frames(b"{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}", 64).await;
        assert_eq!(
            got,
            vec![line(b"{\"a\":1}"), line(b"{\"b\":2}"), line(b"{\"c\":3}"),]
        );
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_reported_by_length_and_the_next_one_still_reads() {
        let long = vec![b'x'; 100];
        let mut input = long.clone();
        input.extend_from_slice(b"\nok\n");
        let got = frames(&input, 10).await;
        assert_eq!(got, vec![Err(100), line(b"ok")]);
    }

    #[tokio::test]
    async fn a_long_line_is_given_the_limit_once_rather_than_doubled() {
        let limit = 3 * LONG_LINE;
        let mut input = vec![b'z'; 2 * LONG_LINE];
        input.push(b'\n');
        let reader = tokio::io::BufReader::with_capacity(64 * 1024, &input[..]);
        let mut frames = FrameReader::new(reader, limit);
        let Some(Frame::Line(line)) = frames.next().await.unwrap() else {
            panic!("a line under the limit is whole");
        };
        assert_eq!(line.len(), 2 * LONG_LINE);
        assert_eq!(
            frames.line.capacity(),
            limit,
            "one reservation at the limit"
        );
        // The next long line reuses that room rather than taking another.
        let held = frames.line.as_ptr();
        let mut again = vec![b'w'; 2 * LONG_LINE + 5];
        again.push(b'\n');
        let mut frames = FrameReader {
            inner: tokio::io::BufReader::new(&again[..]),
            ..frames
        };
        assert!(
            matches!(frames.next().await.unwrap(), Some(Frame::Line(l)) if l.len() == 2 * LONG_LINE + 5)
        );
        assert_eq!(frames.line.as_ptr(), held, "the same buffer");
    }

    #[tokio::test]
    async fn a_stream_may_end_after_an_oversized_line_or_hold_only_blanks() {
        assert_eq!(frames(b"0123456789abc", 10).await, vec![Err(13)]);
        assert_eq!(frames(b"0123456789abc\n", 10).await, vec![Err(13)]);
        assert_eq!(frames(b"", 10).await, Vec::<Read>::new());
        assert_eq!(frames(b" \r\n\n\t", 10).await, Vec::<Read>::new());
        // A blank line over the limit is still over it.
        assert_eq!(frames(&[b' '; 11], 10).await, vec![Err(11)]);
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_limit_is_whole() {
        let got = frames(b"0123456789\n", 10).await;
        assert_eq!(got, vec![line(b"0123456789")]);
    }

    #[tokio::test]
    async fn a_line_that_never_ends_is_bounded() {
        // An unending line from a peer is dropped as it comes; what is held stays under
        // the limit however long it runs.
        let input = vec![b'y'; 10_000];
        let got = frames(&input, 16).await;
        assert_eq!(got, vec![Err(10_000)]);
    }
}
