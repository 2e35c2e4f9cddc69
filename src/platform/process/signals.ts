/**
 * Termination signals as a terminal and npm deliver them. Ctrl-C sends SIGINT to the whole
 * foreground process group, and `npm start` / `npx atrium` (npm stays the parent) forward it
 * to their child as well: the process sees one keypress as two signals milliseconds apart.
 * So a repeat within REPEAT_GRACE_MS of the first signal is the same request; only a later
 * one is the user asking again (docs/operations.md#signals-and-shutdown).
 */
import { constants } from 'node:os';

export const TERMINATION_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
export type TerminationSignal = (typeof TERMINATION_SIGNALS)[number];

/** A second signal sooner than this after the first is taken for the same one. */
export const REPEAT_GRACE_MS = 1000;

/** The exit status of a process that a signal ended: 128 + its number (130 for SIGINT). */
export function signalExitStatus(signal: TerminationSignal): number {
  return 128 + constants.signals[signal];
}

/**
 * Calls `first` on the first termination signal and `again` on a later one that comes at
 * least REPEAT_GRACE_MS after the last one acted on; repeats inside that window are ignored
 * (`repeat`, if given, hears of them). Listeners are added, never replaced: a wrapper such as tsx relays
 * signals through its own. Returns a function that removes them.
 */
export function onTerminationSignals(handlers: {
  first(signal: TerminationSignal): void;
  again(signal: TerminationSignal): void;
  repeat?(signal: TerminationSignal): void;
}): () => void {
  let actedAt: number | undefined;
  const listener = (signal: TerminationSignal) => {
    const now = performance.now();
    if (actedAt !== undefined && now - actedAt < REPEAT_GRACE_MS) return handlers.repeat?.(signal);
    const first = actedAt === undefined;
    actedAt = now;
    if (first) handlers.first(signal);
    else handlers.again(signal);
  };
  for (const signal of TERMINATION_SIGNALS) process.on(signal, listener);
  return () => {
    for (const signal of TERMINATION_SIGNALS) process.removeListener(signal, listener);
  };
}
