//! Newline-delimited JSON-RPC frames over a byte stream, read with a bound: a line
//! longer than the limit is reported by its length and never held whole, so a peer
//! that sends an endless line cannot grow the proxy's memory. It knows nothing of
//! JSON; `rpc` reads what a frame says.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// One frame read from a peer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A whole line, without its line ending.
    Line(Vec<u8>),
    /// A line longer than the limit: its bytes were read and dropped as they came.
    Oversized { len: u64 },
}

/// Reads frames one at a time from `inner`, holding at most `limit` bytes of a line.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    limit: usize,
}

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, limit: usize) -> FrameReader<R> {
        FrameReader { inner, limit }
    }

    /// The next non-blank frame, or `None` at the end of the stream. A last line
    /// without a line ending is still a frame: a peer that exits after writing it
    /// meant it.
    pub async fn next(&mut self) -> io::Result<Option<Frame>> {
        loop {
            match self.line().await? {
                None => return Ok(None),
                Some(Frame::Line(line)) if line.iter().all(u8::is_ascii_whitespace) => continue,
                Some(frame) => return Ok(Some(frame)),
            }
        }
    }

    async fn line(&mut self) -> io::Result<Option<Frame>> {
        let mut line = Vec::new();
        let mut len: u64 = 0;
        let mut oversized = false;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                if len == 0 {
                    return Ok(None);
                }
                return Ok(Some(finish(line, len, oversized)));
            }
            let end = buf.iter().position(|b| *b == b'\n');
            let chunk = &buf[..end.unwrap_or(buf.len())];
            len += chunk.len() as u64;
            if !oversized {
                if line.len() + chunk.len() > self.limit {
                    oversized = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            let used = end.map_or(buf.len(), |i| i + 1);
            self.inner.consume(used);
            if end.is_some() {
                return Ok(Some(finish(line, len, oversized)));
            }
        }
    }
}

fn finish(mut line: Vec<u8>, len: u64, oversized: bool) -> Frame {
    if oversized {
        return Frame::Oversized { len };
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Frame::Line(line)
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

    async fn frames(input: &[u8], limit: usize) -> Vec<Frame> {
        // A small buffer, so that lines span several reads.
        let reader = tokio::io::BufReader::with_capacity(4, input);
        let mut frames = FrameReader::new(reader, limit);
        let mut out = Vec::new();
        while let Some(frame) = frames.next().await.expect("reading a slice cannot fail") {
            out.push(frame);
        }
        out
    }

    #[tokio::test]
    async fn lines_are_split_on_newlines_and_blank_ones_skipped() {
        let got = frames(b"{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}", 64).await;
        assert_eq!(
            got,
            vec![
                Frame::Line(b"{\"a\":1}".to_vec()),
                Frame::Line(b"{\"b\":2}".to_vec()),
                Frame::Line(b"{\"c\":3}".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_reported_by_length_and_the_next_one_still_reads() {
        let long = vec![b'x'; 100];
        let mut input = long.clone();
        input.extend_from_slice(b"\nok\n");
        let got = frames(&input, 10).await;
        assert_eq!(
            got,
            vec![Frame::Oversized { len: 100 }, Frame::Line(b"ok".to_vec())]
        );
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_limit_is_whole() {
        let got = frames(b"0123456789\n", 10).await;
        assert_eq!(got, vec![Frame::Line(b"0123456789".to_vec())]);
    }

    #[tokio::test]
    async fn a_line_that_never_ends_is_bounded() {
        // An unending line from a peer is dropped as it comes; what is held stays under
        // the limit however long it runs.
        let input = vec![b'y'; 10_000];
        let got = frames(&input, 16).await;
        assert_eq!(got, vec![Frame::Oversized { len: 10_000 }]);
    }
}
