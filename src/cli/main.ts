/**
 * `atrium` command line (docs/running.md#command-line): the process around the commands of
 * `commands.ts`. Their answer goes to stdout, messages to stderr; the exit status is 0 when
 * done, 1 when the command failed, 2 after a usage mistake, 130 after Ctrl-C (at a prompt too).
 */
import { runCommand } from './commands.ts';

// A reader that went away (`| head -1`) makes writes to stdout fail (EPIPE): without a
// listener, Node ends the process there with a stack trace, before the command has closed
// what it opened. The command goes on; the end says the answer was not all written.
let unwritten: Error | undefined;
process.stdout.on('error', (error: Error) => {
  unwritten ??= error;
});

/**
 * Whether the answer was all written, once every write to stdout has ended: the first error
 * of one, if any. A write that fails at once marks the stream (`errored`) but tells its
 * 'error' listeners a tick later, after the exit when nothing is left to wait for (--help);
 * a write still under way ends with the callback of the one asked for here.
 */
function answerUnwritten(): Promise<Error | undefined> {
  return new Promise((resolve) => {
    process.stdout.write('', (error) => resolve(unwritten ?? process.stdout.errored ?? error ?? undefined));
  });
}

const io = {
  env: process.env,
  write: (text: string) => void process.stdout.write(text),
  tell: (text: string) => void process.stderr.write(text),
};

void runCommand(process.argv.slice(2), io).then(async (status) => {
  const error = status === 0 ? await answerUnwritten() : undefined;
  if (!error) process.exit(status);
  process.stderr.write(`atrium: standard output was closed before the answer was written (${error.message}); the command was carried out\n`);
  process.exit(1);
});
