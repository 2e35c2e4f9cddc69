/** Reading a password for the command line without putting it in the process list or the shell history. */

/** Ctrl-C typed at a prompt: the command ends as an interrupt ends it (exit 130), without a usage text. */
export class Interrupted extends Error {
  constructor() {
    super('interrupted');
  }
}

/** Characters read without a line break after which reading stops (the password is then longer than any the API takes). */
const MAX_LINE = 16 * 1024;

/**
 * The first line of `stream`, without its line break: read up to that line break, not to
 * the stream's end, so that an input kept open after it (`kubectl exec -i`, a pipe from a
 * program that goes on running) does not hold the command forever.
 */
async function firstLine(stream: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  stream.setEncoding('utf8'); // whole characters, even where a chunk ends inside one
  for await (const chunk of stream) {
    text += String(chunk);
    if (text.includes('\n') || text.length > MAX_LINE) break;
  }
  return text.split(/\r?\n/)[0]!;
}

/** One line typed at the terminal with echo off; the prompt goes to stderr (stdout is the command's answer). */
function prompt(question: string): Promise<string> {
  const input = process.stdin;
  process.stderr.write(question);
  input.setRawMode(true);
  input.resume();
  input.setEncoding('utf8');
  return new Promise((resolve, reject) => {
    let typed = '';
    const finish = (outcome: () => void) => {
      input.setRawMode(false);
      input.pause();
      input.removeListener('data', onData);
      process.stderr.write('\n');
      outcome();
    };
    const onData = (chunk: string) => {
      for (const char of chunk) {
        if (char === '\r' || char === '\n') return finish(() => resolve(typed));
        // Ctrl-C, which raw mode delivers as a character: the interrupt it would have been (exit 130).
        if (char === '\u0003') return finish(() => reject(new Interrupted()));
        if (char === '\u0004') return finish(() => reject(new Error('cancelled')));
        if (char === '\u007f' || char === '\b') typed = [...typed].slice(0, -1).join('');
        else typed += char;
      }
    };
    input.on('data', onData);
  });
}

/**
 * The password: asked for twice at a terminal, or else the first line of standard input
 * (its line break removed). Rejects an empty one, and two entries that differ.
 */
export async function readPassword(question: string, repeat: string): Promise<string> {
  if (process.stdin.isTTY) {
    const first = await prompt(question);
    if (first === '') throw new Error('no password entered');
    if ((await prompt(repeat)) !== first) throw new Error('the two entries differ');
    return first;
  }
  const line = await firstLine(process.stdin);
  if (line === '') throw new Error('no password on standard input (pipe it in, or run the command at a terminal to be asked)');
  return line;
}
