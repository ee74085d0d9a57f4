//! Where a target cuts its stream to feed it in pieces, as a connection's reads would: shared by
//! the targets that feed a stream whole and in pieces (chunked, djust, frame_tracker).

/// Splits `rest` into the cut positions and the stream: `n % 8` cuts, each two bytes (a u16,
/// little-endian, modulo the stream's length + 1) before the stream, in ascending order. `None`
/// when `rest` is too short to hold them.
pub fn split(n: u8, rest: &[u8]) -> Option<(Vec<usize>, &[u8])> {
    let n = usize::from(n % 8);
    if rest.len() < 2 * n {
        return None;
    }
    let (positions, stream) = rest.split_at(2 * n);
    let mut cuts: Vec<usize> =
        positions.chunks(2).map(|p| usize::from(u16::from_le_bytes([p[0], p[1]])) % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    Some((cuts, stream))
}
