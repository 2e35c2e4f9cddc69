// The scenario with the repository's typed client (openapi-typescript + openapi-fetch), as
// consumers get it: test/clients/sdk.test.ts packs clients/typescript, installs the tarball
// into a project of its own outside the repository and compiles this file there.
// eslint-disable-next-line import-x/no-unresolved -- resolved in that project, not in the repository
import { createAtriumClient, formData, select } from '@atrium/client';
import { ADMIN_PASSWORD, BASE_URL, check, eventually, PNG_1X1, RUN, TENANT } from './environment.ts';

const anonymous = createAtriumClient(BASE_URL);
const signIn = await anonymous.POST('/api/auth/login', { body: { tenant: TENANT, username: 'admin', password: ADMIN_PASSWORD } });
check(signIn.data, `sign in: ${signIn.response.status}`);
const admin = createAtriumClient(BASE_URL, { token: signIn.data.access_token });

// Lists type every field as optional (selects may leave any out); `select` asks for fields and types them as present.
const settings = await select(admin, '/api/notification-settings', ['id']);
check(settings.data, 'list notification settings');
const department = await admin.POST('/api/departments', {
  body: { name: `Clients ${RUN}`, tags: ['sdk'], notification_setting_ids: settings.data.map((setting) => setting.id) },
});
check(department.response.status === 201 && department.data, `create department: ${department.response.status}`);
// A create answer holds every field of the record.
const departmentId = department.data.id;

const roles = await select(admin, '/api/roles', ['id', 'name']);
const employee = roles.data?.find((role) => role.name === 'Employee');
check(employee, 'the Employee role');

const password = 'client scenario password';
const user = await admin.POST('/api/users', {
  body: {
    username: `client-${RUN}`,
    password,
    first_name: 'Client',
    last_name: RUN,
    role_id: employee.id,
    department_ids: [departmentId],
    profile_picture: new File([PNG_1X1], 'me.png', { type: 'image/png' }),
  },
  bodySerializer: formData,
});
check(user.response.status === 201 && user.data, `create user with picture: ${user.response.status} ${JSON.stringify(user.error)}`);
check(user.data.profile_picture_url, 'the user has a picture');

const sent = await admin.POST('/api/notifications', { body: { title: `Hello ${RUN}`, body: 'From a typed client', url: '/', department_ids: [departmentId] } });
check(sent.response.status === 202, `notify: ${sent.response.status}`);

const recipientSignIn = await anonymous.POST('/api/auth/login', { body: { tenant: TENANT, username: `client-${RUN}`, password } });
check(recipientSignIn.data, 'recipient signs in');
const recipient = createAtriumClient(BASE_URL, { token: recipientSignIn.data.access_token });
const notification = await eventually('the notification arrives', async () => {
  const list = await select(recipient, '/api/notifications', ['id', 'data'], { params: { query: { filter: { unread: true } } } });
  return list.data?.find((item) => item.data.title === `Hello ${RUN}`);
});
const read = await recipient.PUT('/api/notifications/{notification}', {
  params: { path: { notification: notification.id } },
  body: { read_at: new Date().toISOString().replace('T', ' ').slice(0, 19) },
});
check(read.data?.data.read_at, `mark as read: ${read.response.status}`);
console.log(`openapi-fetch scenario passed (user ${user.data.id}, notification ${notification.id})`);
