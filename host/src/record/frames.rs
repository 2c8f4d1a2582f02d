//! The framing of the `packed-transform` world's batches (`input-batch`, `output-batch` in
//! guest-sdk/wit): every key, value, name and header of a batch back to back in one `data`
//! buffer, framed by one list of lengths, which the canonical ABI copies in one piece each
//! instead of one value per record and field. [`super::RecordBatch`] and [`super::Outputs`]
//! keep their records this way.

/// The length that stands for a Kafka null (key, value, header value) or the default output.
pub(crate) const NULL: u32 = u32::MAX;
/// The watermark or output timestamp that stands for none.
pub(crate) const NONE: i64 = i64::MIN;

/// A packed guest's output batch whose lengths do not frame its data: a bug in its SDK.
#[derive(Debug, thiserror::Error)]
#[error(
    "the transform returned a malformed output batch ({0}); this is a bug in its SDK: rebuild it with a released one"
)]
pub(crate) struct MalformedBatch(pub(crate) String);

/// Where a record starts in a batch's `lengths` and `data`: indexes, `usize` because a batch
/// held by the host may pass 4 GiB (only each field's length is a `u32`, by the WIT).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    pub(crate) length: usize,
    pub(crate) data: usize,
}

impl Start {
    /// Where the next record of `data` and `lengths` starts.
    pub(crate) fn at_end(data: &[u8], lengths: &[u32]) -> Self {
        Self { length: lengths.len(), data: data.len() }
    }
}

/// Appends `bytes` (`None`: a null) to `data`, framed in `lengths`.
pub(crate) fn push_bytes(data: &mut Vec<u8>, lengths: &mut Vec<u32>, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            lengths.push(bytes.len() as u32);
            data.extend_from_slice(bytes);
        }
        None => lengths.push(NULL),
    }
}

/// Reads frames in order: lengths, and the byte ranges they frame.
#[derive(Debug, Clone)]
pub(crate) struct Frames<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) lengths: &'a [u32],
}

/// What frames that are read without checks were checked for when they were built.
const FRAMED: &str = "a batch's frames are checked when it is built";

impl<'a> Frames<'a> {
    /// The frames of the record that starts at `start`.
    pub(crate) fn at(data: &'a [u8], lengths: &'a [u32], start: Start) -> Self {
        Self { data: &data[start.data..], lengths: &lengths[start.length..] }
    }

    pub(crate) fn length(&mut self) -> Result<u32, &'static str> {
        let (&length, rest) = self.lengths.split_first().ok_or("its lengths end early")?;
        self.lengths = rest;
        Ok(length)
    }

    /// The next byte range; `None` for a null.
    pub(crate) fn bytes(&mut self) -> Result<Option<&'a [u8]>, &'static str> {
        let length = self.length()?;
        if length == NULL {
            return Ok(None);
        }
        let (bytes, rest) = self.data.split_at_checked(length as usize).ok_or("a length runs past its data")?;
        self.data = rest;
        Ok(Some(bytes))
    }

    /// The next byte range as UTF-8 text; `None` for a null.
    pub(crate) fn text(&mut self) -> Result<Option<&'a str>, &'static str> {
        match self.bytes()? {
            Some(bytes) => std::str::from_utf8(bytes).map(Some).map_err(|_| "a name that is not UTF-8"),
            None => Ok(None),
        }
    }

    /// The headers that follow: their count, then each one's name and value.
    pub(crate) fn headers(mut self) -> Headers<'a> {
        let left = self.length().expect(FRAMED);
        Headers { frames: self, left }
    }

    /// [`Frames::text`] of a batch that was checked when it was built.
    pub(crate) fn framed_text(&mut self) -> Option<&'a str> {
        self.text().expect(FRAMED)
    }

    /// [`Frames::bytes`] of a batch that was checked when it was built.
    pub(crate) fn framed_bytes(&mut self) -> Option<&'a [u8]> {
        self.bytes().expect(FRAMED)
    }
}

/// A record's headers: name (UTF-8, checked when the batch was built), value (`None` for a
/// null).
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    frames: Frames<'a>,
    left: u32,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        self.left = self.left.checked_sub(1)?;
        let name = self.frames.framed_text().expect(FRAMED);
        Some((name, self.frames.framed_bytes()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Headers<'_> {}
