"""Kernels, their versions, program states, their files and blobs, and session files are
the archive's: their models move from the kernels app to this one. Only Django's idea of
them moves: each keeps its table (kernels_kernel, …) and every row, so no data is copied.
Their content types move with them, so staff permissions and the admin's history follow.
"""


import django.db.models.deletion
import django.utils.timezone
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MOVED = ["blob", "kernel", "kernelversion", "programstate", "sessionfile", "statefile"]


def _relabel(apps: Apps, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    # A database migrated before content types existed for them has nothing to move; one
    # where both labels exist keeps the old rows (never two rows for one model).
    taken = set(ContentType.objects.filter(app_label=new).values_list("model", flat=True))
    ContentType.objects.filter(app_label=old, model__in=set(MOVED) - taken).update(app_label=new)


def move_content_types(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _relabel(apps, "kernels", "tutoring_sessions")


def move_content_types_back(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _relabel(apps, "tutoring_sessions", "kernels")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('kernels', '0012_state_modules'),
        ('tutoring_sessions', '0007_upload'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Blob',
                    fields=[
                        ('sha256', models.CharField(editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('size', models.PositiveIntegerField(editable=False)),
                        ('data', models.BinaryField()),
                    ],
                    options={
                        'db_table': 'kernels_blob',
                    },
                ),
                migrations.CreateModel(
                    name='Kernel',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.SlugField(max_length=60)),
                        ('title', models.CharField(blank=True, max_length=200)),
                        ('harness', models.JSONField(blank=True, default=dict)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='kernels', to='tutoring_sessions.session')),
                    ],
                    options={
                        'db_table': 'kernels_kernel',
                        'ordering': ['session', 'name'],
                    },
                ),
                migrations.CreateModel(
                    name='KernelVersion',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('number', models.PositiveIntegerField()),
                        ('source', models.TextField()),
                        ('sha256', models.CharField(editable=False, max_length=64)),
                        ('host_program', models.TextField(blank=True, help_text="The learner's WebGPU host code (JavaScript). It may fetch() the session's files and kernel.wgsl (this version's WGSL).")),
                        ('harness_override', models.JSONField(blank=True, help_text="Replaces the kernel's harness for this version only.", null=True)),
                        ('note', models.CharField(blank=True, max_length=200)),
                        ('expected_status', models.CharField(blank=True, choices=[('passed', 'passed'), ('mismatch', 'wrong results'), ('nonfinite', 'NaN or infinity in the output'), ('compile_error', 'does not compile'), ('pipeline_error', 'pipeline or binding error'), ('timeout', 'timed out'), ('crashed', 'crashed'), ('threw', 'threw an exception'), ('rejected', 'rejected before running'), ('no_reference', 'ran (nothing to compare with)'), ('infra_error', 'could not run (no GPU adapter)')], max_length=20)),
                        ('meta', models.JSONField(blank=True, default=dict)),
                        ('kernel', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='tutoring_sessions.kernel')),
                        ('turn', models.ForeignKey(blank=True, help_text='The turn that introduced this version.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='introduced_versions', to='tutoring_sessions.turn')),
                    ],
                    options={
                        'db_table': 'kernels_kernelversion',
                        'ordering': ['kernel', 'number'],
                    },
                ),
                migrations.AlterField(
                    model_name='turn',
                    name='kernel_version',
                    field=models.ForeignKey(blank=True, help_text='The kernel version this turn submitted or reviewed.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='turns', to='tutoring_sessions.kernelversion'),
                ),
                migrations.CreateModel(
                    name='ProgramState',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('number', models.PositiveIntegerField()),
                        ('kind', models.CharField(choices=[('webgpu', 'WebGPU'), ('triton', 'Triton'), ('cuda', 'CUDA')], default='webgpu', max_length=10)),
                        ('entry', models.CharField(blank=True, max_length=200)),
                        ('digest', models.CharField(editable=False, max_length=64)),
                        ('modules', models.JSONField(blank=True, default=list)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='states', to='tutoring_sessions.session')),
                    ],
                    options={
                        'db_table': 'kernels_programstate',
                        'ordering': ['session', 'number'],
                    },
                ),
                migrations.AddField(
                    model_name='kernelversion',
                    name='state',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='versions', to='tutoring_sessions.programstate'),
                ),
                migrations.AlterField(
                    model_name='turn',
                    name='state',
                    field=models.ForeignKey(blank=True, help_text="The state of the learner's project this turn wrote or reviewed.", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='turns', to='tutoring_sessions.programstate'),
                ),
                migrations.CreateModel(
                    name='SessionFile',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(help_text='The name a program fetch()es it by.', max_length=200)),
                        ('content_type', models.CharField(blank=True, max_length=100)),
                        ('size', models.PositiveIntegerField(editable=False)),
                        ('sha256', models.CharField(editable=False, max_length=64)),
                        ('data', models.BinaryField()),
                        ('created', models.DateTimeField(default=django.utils.timezone.now)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='files', to='tutoring_sessions.session')),
                    ],
                    options={
                        'db_table': 'kernels_sessionfile',
                        'ordering': ['session', 'name'],
                    },
                ),
                migrations.CreateModel(
                    name='StateFile',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('path', models.CharField(max_length=200)),
                        ('blob', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tutoring_sessions.blob')),
                        ('state', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='files', to='tutoring_sessions.programstate')),
                    ],
                    options={
                        'db_table': 'kernels_statefile',
                        'ordering': ['state', 'path'],
                    },
                ),
                migrations.AddConstraint(
                    model_name='kernel',
                    constraint=models.UniqueConstraint(fields=('session', 'name'), name='kernel_name_unique'),
                ),
                migrations.AddConstraint(
                    model_name='kernel',
                    constraint=models.CheckConstraint(condition=models.Q(('name__regex', '^[-a-zA-Z0-9_]+\\Z')), name='kernel_name_is_a_slug', violation_error_message="A kernel's name is part of its URLs: use letters, digits, hyphens and underscores only."),
                ),
                migrations.AddConstraint(
                    model_name='programstate',
                    constraint=models.UniqueConstraint(fields=('session', 'number'), name='state_number_unique'),
                ),
                migrations.AddConstraint(
                    model_name='programstate',
                    constraint=models.CheckConstraint(condition=models.Q(('number__gte', 1)), name='state_number_from_one'),
                ),
                migrations.AddConstraint(
                    model_name='kernelversion',
                    constraint=models.UniqueConstraint(fields=('kernel', 'number'), name='version_number_unique'),
                ),
                migrations.AddConstraint(
                    model_name='kernelversion',
                    constraint=models.CheckConstraint(condition=models.Q(('number__gte', 1)), name='version_number_from_one'),
                ),
                migrations.AddConstraint(
                    model_name='sessionfile',
                    constraint=models.UniqueConstraint(fields=('session', 'name'), name='session_file_name_unique'),
                ),
                migrations.AddConstraint(
                    model_name='statefile',
                    constraint=models.UniqueConstraint(fields=('state', 'path'), name='state_file_path_unique'),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
