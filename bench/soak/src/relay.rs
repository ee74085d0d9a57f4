//! The fault-injecting TCP relay between roomgate and one backend: roomgate's config names the
//! relay's address for that backend. It forwards bytes both ways, and on demand slows every chunk
//! down or resets every open connection (an RST towards roomgate, as a crashed peer's kernel sends).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Relay {
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    resets: watch::Sender<u64>,
}

impl Relay {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let delay_ms = Arc::new(AtomicU64::new(0));
        let resets = watch::Sender::new(0u64);
        let (delay, reset_rx) = (delay_ms.clone(), resets.subscribe());
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                tokio::spawn(forward(inbound, target, delay.clone(), reset_rx.clone()));
            }
        });
        Ok(Relay { addr, delay_ms, resets })
    }

    /// Every chunk, either way, waits this long before it is written (0: none).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// Resets every connection open now.
    pub fn reset_all(&self) {
        self.resets.send_modify(|n| *n += 1);
    }
}

async fn forward(inbound: TcpStream, target: SocketAddr, delay: Arc<AtomicU64>, mut resets: watch::Receiver<u64>) {
    resets.mark_unchanged();
    let Ok(outbound) = TcpStream::connect(target).await else {
        let _ = inbound.set_zero_linger();
        return; // the backend is down: roomgate sees a reset, as it would from the backend
    };
    let (mut ir, mut iw) = inbound.into_split();
    let (mut or, mut ow) = outbound.into_split();
    let reset = {
        let up = pipe(&mut ir, &mut ow, &delay);
        let down = pipe(&mut or, &mut iw, &delay);
        tokio::select! {
            _ = async { tokio::join!(up, down) } => false,
            _ = resets.changed() => true,
        }
    };
    if reset && let Ok(inbound) = ir.reunite(iw) {
        let _ = inbound.set_zero_linger();
    }
}

/// Copies one direction until its end of stream, then shuts the other side's writing half.
async fn pipe<R, W>(from: &mut R, to: &mut W, delay: &AtomicU64)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let ms = delay.load(Ordering::Relaxed);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
