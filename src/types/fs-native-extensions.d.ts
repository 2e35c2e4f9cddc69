/** The part of fs-native-extensions (which ships no types) that Atrium uses: an exclusive lock on an open file, held by the kernel. */
declare module 'fs-native-extensions' {
  /** Takes the lock of `fd` (opened for writing) unless another open file holds it: whether it did. */
  export function tryLock(fd: number): boolean;
  /** Lets go of the lock of `fd`. */
  export function unlock(fd: number): void;
}
