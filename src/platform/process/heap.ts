import v8 from 'node:v8';

/**
 * Turns off V8's allocation-site pretenuring for this process.
 *
 * V8 watches where objects are allocated; when nearly all objects of one site survive a
 * young-generation collection, it allocates that site's later objects straight into the old
 * generation, which is collected only when it has grown. A request's objects live for the
 * request, so a site that happened to be sampled while its objects waited for PostgreSQL (a
 * CSV preview's batch of rows, say) then puts every later object of the site into the old
 * generation: in a 50,000-row preview, about 25 MiB of garbage a preview instead of 5, and
 * a process peak of 250 MiB instead of 180 (docs/performance.md#the-csv-import-preview).
 * Whether it happens depended on the timing of the first previews a process answered. With
 * pretenuring off, such objects die young, as they were meant to.
 */
export function turnOffPretenuring(): void {
  v8.setFlagsFromString('--no-allocation-site-pretenuring');
}
