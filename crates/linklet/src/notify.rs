//! State-loss notifications (LInK §4.2: "a LInK store informs applications when state may have
//! been lost"). Two ways to listen, both fed by the same `Notifier::emit`:
//!
//! - callbacks ([`crate::Linklet::on_state_loss`]), run synchronously on the thread that lost
//!   the state, after the Linklet's locks are released (a callback may call back into the
//!   Linklet). At most [`crate::limits::STATE_LOSS_CALLBACKS_MAX`] of them;
//! - a bounded tokio `broadcast` channel ([`crate::Linklet::subscribe`]). Broadcast, not
//!   `mpsc`, because the store must never block (or fail) an insert on a slow listener: a
//!   listener that falls [`crate::limits::STATE_LOSS_CHANNEL_CAPACITY`] events behind receives
//!   [`RecvError::Lagged`] and must assume every slot may have lost state.

use std::ops::RangeInclusive;
use std::sync::Arc;

use parking_lot::RwLock;
use ringlet_types::Slot;
use tokio::sync::broadcast;

use crate::limits;
use crate::Error;

/// Some state in `slots` may be gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateLoss {
    /// The slots concerned (one slot for an eviction, the move's range for a failed move).
    pub slots: RangeInclusive<Slot>,
    /// Why.
    pub reason: LossReason,
}

/// Why state may have been lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// `keys` entries of the slot were evicted to stay within capacity.
    Evicted {
        /// How many.
        keys: u64,
    },
    /// The member that owned the slots crashed (reported by the linked-service coordinator
    /// through [`crate::Linklet::report_member_crashed`], called by `ringlet-linked` members).
    MemberCrashed,
    /// An import into this Linklet was aborted; the staged values are dropped.
    MoveFailed,
    /// Entries were dropped because the system of record changed (freshness).
    Invalidated,
}

/// Why [`StateLossReceiver::recv`] returned no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The receiver fell behind and `missed` events were dropped: treat every slot as
    /// possibly lost.
    #[error("state-loss receiver lagged by {missed} events")]
    Lagged {
        /// Events dropped.
        missed: u64,
    },
    /// The Linklet was dropped.
    #[error("state-loss channel closed")]
    Closed,
}

type Callback = Arc<dyn Fn(&StateLoss) + Send + Sync>;

/// Fan-out of state-loss events to callbacks and channel subscribers.
pub(crate) struct Notifier {
    callbacks: RwLock<Vec<Callback>>,
    tx: broadcast::Sender<StateLoss>,
}

impl Notifier {
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(limits::STATE_LOSS_CHANNEL_CAPACITY);
        Notifier {
            callbacks: RwLock::new(Vec::new()),
            tx,
        }
    }

    pub(crate) fn register(&self, f: Callback) -> Result<(), Error> {
        let mut callbacks = self.callbacks.write();
        if callbacks.len() >= limits::STATE_LOSS_CALLBACKS_MAX {
            return Err(Error::TooManyCallbacks);
        }
        callbacks.push(f);
        Ok(())
    }

    pub(crate) fn subscribe(&self) -> StateLossReceiver {
        StateLossReceiver {
            rx: self.tx.subscribe(),
        }
    }

    /// Deliver one event. Callers hold no Linklet lock.
    pub(crate) fn emit(&self, loss: StateLoss) {
        // Clone the list so a callback that registers another callback cannot deadlock.
        let callbacks: Vec<Callback> = self.callbacks.read().clone();
        for cb in &callbacks {
            cb(&loss);
        }
        // `Err` only means "no subscriber right now": nobody to tell.
        let _ = self.tx.send(loss);
    }
}

/// An async stream of [`StateLoss`] events, from [`crate::Linklet::subscribe`]. Sees the events
/// emitted after it was created.
#[derive(Debug)]
pub struct StateLossReceiver {
    rx: broadcast::Receiver<StateLoss>,
}

impl StateLossReceiver {
    /// The next event, waiting for one.
    ///
    /// # Errors
    /// [`RecvError::Lagged`] after falling behind (the next call resumes with the oldest event
    /// still held); [`RecvError::Closed`] once the Linklet is gone.
    pub async fn recv(&mut self) -> Result<StateLoss, RecvError> {
        self.rx.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(missed) => RecvError::Lagged { missed },
            broadcast::error::RecvError::Closed => RecvError::Closed,
        })
    }

    /// The next event if one is waiting (`Ok(None)` if none).
    ///
    /// # Errors
    /// As [`StateLossReceiver::recv`].
    pub fn try_recv(&mut self) -> Result<Option<StateLoss>, RecvError> {
        match self.rx.try_recv() {
            Ok(loss) => Ok(Some(loss)),
            Err(broadcast::error::TryRecvError::Empty) => Ok(None),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                Err(RecvError::Lagged { missed })
            }
            Err(broadcast::error::TryRecvError::Closed) => Err(RecvError::Closed),
        }
    }
}
