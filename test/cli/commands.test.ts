import t from 'tap';
import { runCommand } from '../../src/cli/commands.ts';

// The command line's answers to how it is called: help, usage mistakes and the arguments it
// refuses, in this process (`runCommand`, which `atrium` runs). Every case points the
// configuration at a database that is down: nothing listens on port 1, so a command that
// opened the database would fail with status 1 ("the database at …", main.test.ts shows it)
// instead of the usage mistake expected, and a refusal told here has changed nothing. No case
// here opens the database (that sets up process-wide signal handling). What only the process
// shows (the exit status, stdout and stderr apart, standard input, a closed stdout, signals)
// and every command that reaches the database: main.test.ts and signals.test.ts.
const down = { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/atrium', LOG_LEVEL: 'silent' };

/** `atrium <args>` with the database down: the exit status `atrium` would end with, and what it would write. */
async function atrium(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCommand(args, {
    env: down,
    write: (text) => void (stdout += text),
    tell: (text) => void (stderr += text),
  });
  return { code, stdout, stderr };
}

t.test('--help: the overview and the usage of each command, on stdout, exit 0', async (t) => {
  const commands = ['migrate', 'tenant:create', 'token:create', 'user:set-password', 'citus:distribute'];
  const overview = /^usage: atrium <command> \[options\]\n/;
  const cases: [string[], RegExp][] = [
    [['--help'], overview],
    [['help'], overview],
    ...commands.flatMap((command) =>
      [
        [command, '--help'],
        [command, '-h'],
        ['help', command],
      ].map((args): [string[], RegExp] => [args, new RegExp(`^usage: atrium ${command}\\b`)]),
    ),
  ];
  for (const [args, usage] of cases) {
    const result = await atrium(...args);
    t.equal(result.code, 0, args.join(' '));
    t.equal(result.stderr, '');
    t.match(result.stdout, usage);
    if (usage === overview) {
      for (const command of commands) t.match(result.stdout, `\n  ${command} `);
      t.match(result.stdout, 'In a checkout the command is npx atrium', 'how to call it where the bin is not on the PATH');
    }
  }
  // Help on a command that does not exist is a usage mistake, as the command itself would be; an object's own keys are none.
  const unknowns = ['bogus', 'constructor', 'toString'];
  for (const [args, name] of [
    ...unknowns.map((name): [string[], string] => [['help', name], name]),
    [['constructor'], 'constructor'],
    [['__proto__'], '__proto__'],
  ] as [string[], string][]) {
    const answer = await atrium(...args);
    t.equal(answer.code, 2, name);
    t.equal(answer.stdout, '');
    t.match(answer.stderr, new RegExp(`^atrium: unknown command "${name}"\\n\\nusage: atrium <command> \\[options\\]\\n`));
  }
});

t.test('usage mistakes print the message and the usage on stderr, exit 2', async (t) => {
  const mistakes: [string[], RegExp][] = [
    [[], /^atrium: no command given\n\nusage: atrium <command>/],
    [['frobnicate'], /^atrium: unknown command "frobnicate"\n\nusage: atrium <command>/],
    [['token:create', '--tenant', 'cli-co', '--bogus', 'x'], /^atrium: Unknown option '--bogus'.*\n\nusage: atrium token:create /],
    [['token:create', '--tenant', 'cli-co'], /^atrium: --username is required\n\nusage: atrium token:create /],
    [['citus:distribute', '--shard-count', 'many'], /^atrium: --shard-count must be an integer from 1 to 64000\n\nusage: atrium citus:distribute /],
  ];
  for (const [args, stderr] of mistakes) {
    const result = await atrium(...args);
    t.equal(result.code, 2, args.join(' '));
    t.equal(result.stdout, '');
    t.match(result.stderr, stderr);
    t.notMatch(result.stderr, /\bat .*:\d+:\d+/, 'no stack trace');
  }
});

t.test('arguments the commands refuse are usage mistakes, told before the database is opened', async (t) => {
  const cases: [string[], RegExp][] = [
    [['tenant:create'], /tenant:create needs a <slug>/],
    [['tenant:create', 'x', '--name', 'X', '--admin-username', 'a', '--admin-password', 'short'], /--admin-password must have at least/],
    [['tenant:create', 'Bad Slug', '--name', 'X', '--admin-username', 'a', '--admin-password', 'long-enough-password'], /the <slug> must be/],
    [['tenant:create', 'Bad Slug', '--name', 'X', '--admin-username', 'root'], /the <slug> must be/],
    [['tenant:create', 'a'.repeat(64), '--name', 'X', '--admin-username', 'a', '--admin-password', 'long-enough-password'], /the <slug> must be/],
    // What the API refuses could never sign in: a username beyond its schema or reserved, a password over its limit.
    [['tenant:create', 'cli-long-user', '--name', 'X', '--admin-username', 'u'.repeat(256), '--admin-password', 'long-enough-password'], /--admin-username /],
    [['tenant:create', 'cli-blank-user', '--name', 'X', '--admin-username', ' ', '--admin-password', 'long-enough-password'], /--admin-username /],
    [['tenant:create', 'cli-spaced-user', '--name', 'X', '--admin-username', 'root ', '--admin-password', 'long-enough-password'], /--admin-username /],
    [
      ['tenant:create', 'cli-reserved-user', '--name', 'X', '--admin-username', 'deleted-user-13', '--admin-password', 'long-enough-password'],
      /--admin-username /,
    ],
    [
      ['tenant:create', 'cli-long-password', '--name', 'X', '--admin-username', 'root', '--admin-password', 'p'.repeat(1025)],
      /--admin-password must have at most 1024/,
    ],
    [
      ['tenant:create', 'cli-long-name', '--name', 'n'.repeat(201), '--admin-username', 'root', '--admin-password', 'long-enough-password'],
      /--name must have at most 200/,
    ],
    [['tenant:create', 'cli-down', '--name', 'X', '--admin-username', 'root', '--admin-password', 'short'], /--admin-password must have at least/],
    // Six emoji are twelve UTF-16 units but six characters: counted as the API counts a password (code points), shorter than the minimum of ten.
    [['tenant:create', 'cli-emoji', '--name', 'Emoji', '--admin-username', 'root', '--admin-password', '😀'.repeat(6)], /--admin-password must have at least/],
    // Nine accented letters typed as letter and combining accent: eighteen code points, nine characters (the API's count).
    [
      ['tenant:create', 'cli-accent', '--name', 'X', '--admin-username', 'root', '--admin-password', 'e\u0301'.repeat(9)],
      /--admin-password must have at least/,
    ],
    // One character that NFKC writes as eighteen is still one.
    [['tenant:create', 'cli-ligature', '--name', 'X', '--admin-username', 'root', '--admin-password', '\ufdfa'], /--admin-password must have at least/],
    // An argument no command takes is a mistake to tell, not to pass over.
    [['migrate', 'extra'], /unexpected argument "extra"/],
    [['token:create', '--tenant', 'cli-co', '--username', 'root', 'extra'], /unexpected argument "extra"/],
    [
      ['tenant:create', 'cli-extra', 'extra', '--name', 'X', '--admin-username', 'a', '--admin-password', 'long-enough-password'],
      /unexpected argument "extra"/,
    ],
    [['token:create', '--tenant', 'cli-co'], /--username is required/],
    [['user:set-password', '--tenant', 'cli-co'], /--username is required/],
    [['token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '0'], /--expires-in must be/],
    [['token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', 'soon'], /--expires-in must be/],
    // Beyond any date, or not decimal: a usage error, not the failed statement with its values (the token's hash).
    [['token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '8000000000000'], /--expires-in must be/],
    [['token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '0x10'], /--expires-in must be/],
    [['citus:distribute', '--shard-count', 'many'], /--shard-count must be an integer/],
    // Not decimal digits, as --expires-in and the configuration's integers must be.
    [['citus:distribute', '--shard-count', '0x10'], /--shard-count must be an integer/],
    [['citus:distribute', '--shard-count', '1e2'], /--shard-count must be an integer/],
  ];
  for (const [args, message] of cases) {
    const result = await atrium(...args);
    t.equal(result.code, 2, `${args.join(' ').slice(0, 60)}: a usage mistake`);
    t.equal(result.stdout, '', 'nothing on stdout');
    t.match(result.stderr, /^atrium: /);
    t.match(result.stderr, message);
    t.match(result.stderr, new RegExp(`\\n\\nusage: atrium ${args[0]}\\b`), 'the usage of the command');
    t.notMatch(result.stderr, /the database at/, 'the database is not asked');
    t.notMatch(result.stderr, /insert into|params/i, 'no statement quoted');
  }
});

t.test('an option given twice is a usage mistake that names it, told before the database is opened', async (t) => {
  const cases: [string[], string][] = [
    [['tenant:create', 'cli-twice', '--name', 'A', '--name', 'B', '--admin-username', 'root'], '--name'],
    [['tenant:create', 'cli-twice', '--name=A', '--admin-username', 'root', '--name', 'B'], '--name'],
    [
      ['tenant:create', 'cli-twice', '--name', 'A', '--admin-username', 'root', '--admin-password', 'long-enough-1', '--admin-password', 'long-enough-2'],
      '--admin-password',
    ],
    [['token:create', '--tenant', 'cli-co', '--tenant', 'other', '--username', 'root'], '--tenant'],
    [['token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '60', '--expires-in', '600'], '--expires-in'],
    [['user:set-password', '--tenant', 'cli-co', '--username', 'a', '--username', 'b'], '--username'],
    [['citus:distribute', '--shard-count', '4', '--shard-count', '8'], '--shard-count'],
  ];
  for (const [args, option] of cases) {
    const result = await atrium(...args);
    t.equal(result.code, 2, args.join(' '));
    t.equal(result.stdout, '', 'nothing on stdout');
    t.match(result.stderr, new RegExp(`^atrium: ${option} is given more than once\\n\\nusage: atrium ${args[0]} `), `${option} named`);
    t.notMatch(result.stderr, /the database at/, 'the database is not asked');
  }
});

t.test('tenant:create refuses a blank name, or one with control or other invisible characters, as the API refuses names', async (t) => {
  // As a role's or a department's name is judged (src/resources/roles/names.ts): shown to people, it must show as it is.
  const cases: [string, string, RegExp][] = [
    ['cli-blank-name', '   ', /^atrium: --name must not be blank\n\nusage: atrium tenant:create /],
    ['cli-empty-name', '', /^atrium: --name is required\n\nusage: atrium tenant:create /],
    ['cli-newline-name', 'Acme\nInc.', /^atrium: --name may not contain control, format or other invisible characters\n\nusage: atrium tenant:create /],
    ['cli-bell-name', 'Acme\u0007', /^atrium: --name may not contain control, format or other invisible characters\n\nusage: atrium tenant:create /],
    ['cli-bidi-name', 'Acme \u202eInc.', /^atrium: --name may not contain control, format or other invisible characters\n/],
    ['cli-spaced-name', ' Acme', /^atrium: --name may not begin or end with whitespace\n/],
  ];
  for (const [slug, name, message] of cases) {
    const result = await atrium('tenant:create', slug, '--name', name, '--admin-username', 'root', '--admin-password', 'long-enough-password');
    t.equal(result.code, 2, `${slug}: a usage mistake`);
    t.equal(result.stdout, '', 'nothing on stdout');
    t.match(result.stderr, message, slug);
  }
});
