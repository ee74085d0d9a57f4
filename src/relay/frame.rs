//! WebSocket frame boundaries (RFC 6455 section 5.2), tracked over a byte stream that arrives in
//! arbitrary chunks. Headers are parsed; payloads are skipped, never unmasked or copied, except the
//! two-byte status code of a close frame and the token of a pong the relay awaits. This is what
//! lets the relay stop a direction between two frames, send a close frame of its own, and know
//! when a peer has read up to a point (its pong to the relay's ping).

/// Opcode of a close frame.
pub const OP_CLOSE: u8 = 0x8;

/// Length of the payload of the ping a pause sends as its fence (a random token).
pub const FENCE_LEN: usize = 8;

/// [`FrameTracker`]'s `fence` once its pong came (never a token: see `expect_pong`).
const ANSWERED: u64 = u64::MAX;

/// Close code for a close frame with no status code (RFC 6455 section 7.4.1, never sent on the wire).
pub const NO_STATUS: u16 = 1005;

/// What a peer's frames must look like (RFC 6455 section 5.2): a client's masked and a server's
/// not, RSV bits only where a negotiated extension defines them, known opcodes, fragments in
/// order, close frames with no body or at least a status code. A relay that passed anything else
/// on could be made to carry frames the next hop reads differently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// `Some(masked)`: checked; `None`: any (a tracker that only follows boundaries).
    pub masked: Option<bool>,
    /// RSV bits (of 0x70) the negotiated extensions allow.
    pub rsv: u8,
}

impl Rules {
    /// Frames from a client: masked.
    pub const CLIENT: Rules = Rules { masked: Some(true), rsv: 0 };
    /// Frames from a server: unmasked.
    pub const SERVER: Rules = Rules { masked: Some(false), rsv: 0 };

    /// The same rules with the RSV bits of the negotiated extensions allowed.
    pub fn with_rsv(self, rsv: u8) -> Rules {
        Rules { rsv: rsv & 0x70, ..self }
    }

    /// Checks a frame from its first two bytes; `in_message` follows fragmentation (a data frame
    /// without FIN opens a message, its last continuation closes it).
    pub fn check(&self, b0: u8, b1: u8, in_message: &mut bool) -> Result<(), FrameError> {
        let Some(masked) = self.masked else { return Ok(()) };
        let opcode = b0 & 0x0f;
        if b0 & 0x70 & !self.rsv != 0 {
            return Err(FrameError::ReservedBits(b0 & 0x70));
        }
        if (b1 & 0x80 != 0) != masked {
            return Err(if masked { FrameError::Unmasked } else { FrameError::Masked });
        }
        match opcode {
            OP_CONTINUATION if !*in_message => return Err(FrameError::Fragmentation),
            OP_TEXT | OP_BINARY if *in_message => return Err(FrameError::Fragmentation),
            OP_CONTINUATION | OP_TEXT | OP_BINARY => *in_message = b0 & 0x80 == 0,
            OP_CLOSE if b1 & 0x7f == 1 => return Err(FrameError::CloseLength),
            OP_CLOSE | OP_PING | OP_PONG => {}
            other => return Err(FrameError::ReservedOpcode(other)),
        }
        Ok(())
    }
}

/// Tracks where frames begin and end in one direction of a WebSocket connection.
#[derive(Clone, Debug, Default)]
pub struct FrameTracker {
    /// Header bytes seen so far for the frame being parsed (at most 14).
    head: [u8; 14],
    head_len: u8,
    /// Payload bytes left in the current frame, once its header is complete.
    remaining: u64,
    in_payload: bool,
    opcode: u8,
    /// Offset into the current payload, saturating at 255: only its first bytes are looked at.
    payload_off: u8,
    /// The status code of the close frame in progress.
    code: [u8; 2],
    /// The token of the pong that answers the relay's own ping (see
    /// [`FrameTracker::expect_pong`]): 0 while none is awaited, [`ANSWERED`] once it came.
    fence: u64,
    /// The pong in progress carries `fence`, as far as it has come.
    pong_matches: bool,
    frames: u64,
    close_code: Option<u16>,
    rules: Rules,
    /// A fragmented data message is in progress (with strict rules).
    in_message: bool,
}

/// What a call to [`FrameTracker::feed`] saw in its chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Feed {
    /// Offset just past the first frame that ended in this chunk.
    pub first_boundary: Option<usize>,
    /// Offset just past the first close frame that ended in this chunk.
    pub close_end: Option<usize>,
}

/// A frame header that cannot be valid: the stream can no longer be followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame length has its most significant bit set")]
    LengthOverflow,
    #[error("control frame (opcode {0:#x}) longer than 125 bytes")]
    ControlTooLong(u8),
    #[error("control frame (opcode {0:#x}) is fragmented")]
    ControlFragmented(u8),
    #[error("a client frame is not masked")]
    Unmasked,
    #[error("a server frame is masked")]
    Masked,
    #[error("reserved bits {0:#x} set without an extension that defines them")]
    ReservedBits(u8),
    #[error("reserved opcode {0:#x}")]
    ReservedOpcode(u8),
    #[error("data frames out of order (a continuation without a message, or a message inside another)")]
    Fragmentation,
    #[error("a close frame with a one-byte body")]
    CloseLength,
}

impl FrameTracker {
    /// A tracker that follows boundaries and accepts any well-formed header.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker that also enforces `rules` on every frame.
    pub fn strict(rules: Rules) -> Self {
        FrameTracker { rules, ..Self::default() }
    }

    /// True between two frames: a frame of the relay's own can be inserted here.
    #[inline]
    pub fn at_boundary(&self) -> bool {
        !self.in_payload && self.head_len == 0
    }

    /// How many more bytes the stream needs to reach the next frame boundary, or, inside a
    /// header, its next known part: a reader that never takes more never reads past a boundary.
    /// `None` at a boundary.
    pub fn until_boundary(&self) -> Option<u64> {
        if self.at_boundary() {
            return None;
        }
        let need = if self.in_payload { self.remaining } else { (self.head_need() - self.head_len as usize) as u64 };
        Some(need.max(1))
    }

    /// Frames completed so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The status code of the first close frame seen, if any ([`NO_STATUS`] for an empty one).
    pub fn close_code(&self) -> Option<u16> {
        self.close_code
    }

    /// Watches the stream for a pong whose payload is `token`, big-endian: the answer to a ping
    /// the relay sent the other way (a pause's fence). 0 stops watching; either forgets an
    /// earlier answer. A token is neither 0 nor `u64::MAX`.
    pub fn expect_pong(&mut self, token: u64) {
        debug_assert!(token != ANSWERED);
        self.fence = token;
    }

    /// The pong [`FrameTracker::expect_pong`] awaits has ended in the stream.
    pub fn pong_answered(&self) -> bool {
        self.fence == ANSWERED
    }

    /// A pong is awaited, or came.
    pub fn awaits_pong(&self) -> bool {
        self.fence != 0
    }

    /// Follows the frames in `data`, the next bytes of the stream.
    pub fn feed(&mut self, data: &[u8]) -> Result<Feed, FrameError> {
        let mut feed = Feed::default();
        let mut i = 0;
        while i < data.len() {
            if !self.in_payload {
                i += self.read_head(&data[i..])?;
                if !self.in_payload {
                    break; // the header continues in the next chunk
                }
            }
            let take = self.remaining.min((data.len() - i) as u64) as usize;
            if (self.payload_off as usize) < FENCE_LEN && self.captures() {
                self.capture(&data[i..i + take]);
            }
            self.payload_off = self.payload_off.saturating_add(take.min(255) as u8);
            self.remaining -= take as u64;
            i += take;
            if self.remaining == 0 {
                self.end_frame(i, &mut feed);
            }
        }
        Ok(feed)
    }

    /// Consumes header bytes from `data`; returns how many. Sets `in_payload` once complete.
    fn read_head(&mut self, data: &[u8]) -> Result<usize, FrameError> {
        let mut used = 0;
        loop {
            let need = self.head_need();
            let have = self.head_len as usize;
            if have == need {
                break;
            }
            let take = (need - have).min(data.len() - used);
            if take == 0 {
                return Ok(used);
            }
            self.head[have..have + take].copy_from_slice(&data[used..used + take]);
            self.head_len += take as u8;
            used += take;
            if have < 2 && self.head_len >= 2 {
                self.check_control()?;
                self.rules.check(self.head[0], self.head[1], &mut self.in_message)?;
            }
        }
        self.start_payload()?;
        Ok(used)
    }

    /// Header length implied by the bytes seen so far (2 until the second byte is known).
    fn head_need(&self) -> usize {
        if self.head_len < 2 {
            return 2;
        }
        head_len(self.head[1])
    }

    /// Control frames are short and whole; known from the first two header bytes.
    fn check_control(&self) -> Result<(), FrameError> {
        let (b0, b1) = (self.head[0], self.head[1]);
        let opcode = b0 & 0x0f;
        if opcode & 0x8 != 0 {
            if b1 & 0x7f > 125 {
                return Err(FrameError::ControlTooLong(opcode));
            }
            if b0 & 0x80 == 0 {
                return Err(FrameError::ControlFragmented(opcode));
            }
        }
        Ok(())
    }

    fn start_payload(&mut self) -> Result<(), FrameError> {
        let (b0, b1) = (self.head[0], self.head[1]);
        let opcode = b0 & 0x0f;
        let len = match b1 & 0x7f {
            126 => u16::from_be_bytes([self.head[2], self.head[3]]) as u64,
            127 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.head[2..10]);
                u64::from_be_bytes(b)
            }
            n => n as u64,
        };
        if len >> 63 != 0 {
            return Err(FrameError::LengthOverflow);
        }
        self.opcode = opcode;
        self.remaining = len;
        self.payload_off = 0;
        self.pong_matches = true;
        self.in_payload = true;
        Ok(())
    }

    /// Whether the current frame's first payload bytes are kept: a close frame's, and a pong's
    /// while one is awaited.
    fn captures(&self) -> bool {
        self.opcode == OP_CLOSE || (self.opcode == OP_PONG && self.fence != 0 && self.fence != ANSWERED)
    }

    /// Looks at the payload bytes at the current offset: a close frame's status code is kept, a
    /// pong's first bytes are compared with the token awaited.
    fn capture(&mut self, bytes: &[u8]) {
        let mask = self.mask();
        let token = self.fence.to_be_bytes();
        for (j, &b) in bytes.iter().enumerate() {
            let off = self.payload_off as usize + j;
            if off >= FENCE_LEN || (self.opcode == OP_CLOSE && off >= 2) {
                break;
            }
            let b = b ^ mask.map_or(0, |m| m[off % 4]);
            if self.opcode == OP_CLOSE {
                self.code[off] = b;
            } else if b != token[off] {
                self.pong_matches = false;
            }
        }
    }

    /// The masking key of the frame in progress, from its header (kept until the frame ends).
    fn mask(&self) -> Option<[u8; 4]> {
        let b1 = self.head[1];
        if b1 & 0x80 == 0 {
            return None;
        }
        let at = head_len(b1) - 4;
        Some([self.head[at], self.head[at + 1], self.head[at + 2], self.head[at + 3]])
    }

    fn end_frame(&mut self, at: usize, feed: &mut Feed) {
        self.frames += 1;
        feed.first_boundary.get_or_insert(at);
        if self.opcode == OP_PONG && self.captures() && self.payload_off as usize == FENCE_LEN && self.pong_matches {
            self.fence = ANSWERED;
        }
        if self.opcode == OP_CLOSE {
            let code = if self.payload_off >= 2 { u16::from_be_bytes(self.code) } else { NO_STATUS };
            self.close_code.get_or_insert(code);
            feed.close_end.get_or_insert(at);
        }
        self.head_len = 0;
        self.in_payload = false;
        self.payload_off = 0;
    }
}

/// Opcode of a text frame.
pub const OP_TEXT: u8 = 0x1;
/// Opcode of a binary frame.
pub const OP_BINARY: u8 = 0x2;
/// Opcode of a continuation frame.
pub const OP_CONTINUATION: u8 = 0x0;
/// Opcode of a ping frame.
pub const OP_PING: u8 = 0x9;
/// Opcode of a pong frame.
pub const OP_PONG: u8 = 0xA;

/// Length of a frame header whose second byte is `b1` (2 to 14).
pub fn head_len(b1: u8) -> usize {
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + ext + if b1 & 0x80 != 0 { 4 } else { 0 }
}

/// A frame header parsed from a contiguous slice (see [`parse_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub fin: bool,
    pub opcode: u8,
    pub mask: Option<[u8; 4]>,
    /// Header length in bytes (2 to 14).
    pub len: usize,
    pub payload_len: u64,
}

impl Head {
    /// Header and payload together, saturating on absurd lengths.
    pub fn frame_len(&self) -> u64 {
        (self.len as u64).saturating_add(self.payload_len)
    }
}

/// The header at the start of `data`: `Ok(None)` when `data` is too short to hold all of it.
pub fn parse_head(data: &[u8]) -> Result<Option<Head>, FrameError> {
    let mut t = FrameTracker::new();
    let need = {
        if data.len() < 2 {
            return Ok(None);
        }
        t.head[..2].copy_from_slice(&data[..2]);
        t.head_len = 2;
        t.check_control()?;
        t.head_need()
    };
    if data.len() < need {
        return Ok(None);
    }
    t.head[..need].copy_from_slice(&data[..need]);
    t.head_len = need as u8;
    t.start_payload()?;
    Ok(Some(Head { fin: data[0] & 0x80 != 0, opcode: t.opcode, mask: t.mask(), len: need, payload_len: t.remaining }))
}

/// Undoes (or applies) a frame mask on payload bytes starting at payload offset `offset`.
pub fn unmask(bytes: &mut [u8], mask: Option<[u8; 4]>, offset: usize) {
    if let Some(m) = mask {
        for (i, b) in bytes.iter_mut().enumerate() {
            *b ^= m[(offset + i) % 4];
        }
    }
}

/// One whole frame (FIN set) with `opcode` and `payload`, masked with `mask` when sent to a server.
pub fn frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(14 + payload.len());
    out.push(0x80 | opcode);
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => out.push(bit | n as u8),
        n @ 126..=0xffff => {
            out.push(bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if let Some(m) = mask {
        out.extend_from_slice(&m);
    }
    let start = out.len();
    out.extend_from_slice(payload);
    unmask(&mut out[start..], mask, 0);
    out
}

/// A close frame with `code` and a short `reason`, masked with `mask` when sent to a server. A
/// reason over the 123 bytes a close frame has room for is cut at a character boundary: the
/// peer must get valid UTF-8 (RFC 6455 section 5.5.1).
pub fn close_frame(code: u16, reason: &str, mask: Option<[u8; 4]>) -> Vec<u8> {
    let reason = reason.as_bytes().get(..reason.floor_char_boundary(123)).unwrap_or_default();
    let mut payload = Vec::with_capacity(2 + reason.len());
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(reason);
    frame(OP_CLOSE, &payload, mask)
}

#[cfg(test)]
mod tests;
