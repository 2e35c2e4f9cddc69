// The scenario with the SDK that @hey-api/openapi-ts generates (fetch client).
import { createClient } from '../.generated/hey-api/client/index.ts';
import {
  createDepartment,
  createNotification,
  createUser,
  listNotifications,
  listNotificationSettings,
  listRoles,
  login,
  updateNotification,
  uploadProfilePicture,
} from '../.generated/hey-api/index.ts';
import { ADMIN_PASSWORD, BASE_URL, check, eventually, PNG_1X1, RUN, TENANT } from './environment.ts';

const anonymous = createClient({ baseUrl: BASE_URL });
const signIn = await login({ client: anonymous, body: { tenant: TENANT, username: 'admin', password: ADMIN_PASSWORD } });
check(signIn.data, `sign in: ${signIn.response.status}`);
const admin = createClient({ baseUrl: BASE_URL, auth: signIn.data.access_token });

const settings = await listNotificationSettings({ client: admin });
check(settings.data, 'list notification settings');
const department = await createDepartment({
  client: admin,
  body: { name: `Clients ${RUN}`, tags: ['sdk'], notification_setting_ids: settings.data.flatMap((setting) => (setting.id === undefined ? [] : [setting.id])) },
});
check(department.response.status === 201 && department.data, `create department: ${department.response.status}`);
// A create answer holds every field of the record.
const departmentId = department.data.id;

// A list's records may lack any field (selects may leave it out): the program checks what it uses.
const roles = await listRoles({ client: admin, query: { selects: 'id,name' } });
const employeeId = roles.data?.find((role) => role.name === 'Employee')?.id;
check(employeeId, 'the Employee role');

const password = 'client scenario password';
const user = await createUser({
  client: admin,
  body: { username: `client-${RUN}`, password, first_name: 'Client', last_name: RUN, role_id: employeeId, department_ids: [departmentId] },
});
check(user.response.status === 201 && user.data, `create user: ${user.response.status} ${JSON.stringify(user.error)}`);
const picture = await uploadProfilePicture({
  client: admin,
  path: { user: user.data.id },
  body: { profile_picture: new File([PNG_1X1], 'me.png', { type: 'image/png' }) },
});
check(picture.data?.profile_picture_url, `upload the picture: ${picture.response.status} ${JSON.stringify(picture.error)}`);

const sent = await createNotification({
  client: admin,
  body: { title: `Hello ${RUN}`, body: 'From a typed client', url: '/', department_ids: [departmentId] },
});
check(sent.response.status === 202, `notify: ${sent.response.status}`);

const recipientSignIn = await login({ client: anonymous, body: { tenant: TENANT, username: `client-${RUN}`, password } });
check(recipientSignIn.data, 'recipient signs in');
const recipient = createClient({ baseUrl: BASE_URL, auth: recipientSignIn.data.access_token });
const notification = await eventually('the notification arrives', async () => {
  const list = await listNotifications({ client: recipient, query: { filter: { unread: true } } });
  return list.data?.find((item) => item.data?.title === `Hello ${RUN}`)?.id;
});
const read = await updateNotification({
  client: recipient,
  path: { notification },
  body: { read_at: new Date().toISOString().replace('T', ' ').slice(0, 19) },
});
check(read.data?.data.read_at, `mark as read: ${read.response.status}`);
console.log(`hey-api scenario passed (user ${user.data.id}, notification ${notification})`);
